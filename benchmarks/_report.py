"""Writing a benchmark's results into BENCHMARKS.md (shared by the benchmark scripts)."""
from __future__ import annotations

from pathlib import Path

BENCHMARKS = Path(__file__).resolve().parents[1] / "BENCHMARKS.md"


def replace_section(heading: str, section: str, path: Path = BENCHMARKS) -> None:
    """Put ``section`` (starting with ``## <heading>``) in place of the section of that heading in
    ``path``, or append it when there is none; the other sections stay as they are."""
    text = path.read_text() if path.exists() else "# Benchmarks\n"
    section = section.rstrip("\n") + "\n"
    start = text.find(f"## {heading}")
    if start >= 0:
        end = text.find("\n## ", start + 1)
        text = text[:start] + section + ("" if end < 0 else "\n" + text[end + 1:])
    else:
        text = text.rstrip("\n") + "\n\n" + section
    path.write_text(text)


def write_speedup(heading: str, command: str, setup: str, executor: str, serial: tuple,
                  parallel: tuple, verdict: str) -> None:
    """Record a serial-against-executor timing as the section ``heading`` of BENCHMARKS.md.

    ``serial`` is ``(wall s, CPU s per wall s of the driver)``; ``parallel`` is ``(wall s, of
    which s starting the workers)``; ``setup`` says what ran, ``verdict`` the speed-up and the
    comparison of outputs."""
    (t_serial, cpu), (t_par, t_start) = serial, parallel
    replace_section(heading, "\n".join([
        f"## {heading}", "", f"    .venv/bin/python {command}", "", setup, "",
        "| run | wall (s) | CPU s per wall s (driver process) |", "|---|---|---|",
        f"| serial | {t_serial:.0f} | {cpu:.2f} |",
        f"| {executor} (incl. {t_start:.0f} s starting workers) | {t_par:.0f} | - |", "",
        verdict]))
