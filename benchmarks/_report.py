"""Writing a benchmark's results into BENCHMARKS.md (shared by the benchmark scripts)."""
from __future__ import annotations

import tempfile
import time
from pathlib import Path

from scaleout import get_executor, use_compile_cache

BENCHMARKS = Path(__file__).resolve().parents[1] / "BENCHMARKS.md"


#: A line in a generated section after which its hand-written notes begin: regenerating the
#: section keeps them.
NOTES = "Notes (kept when the section above is regenerated):"


def replace_section(heading: str, section: str, path: Path = BENCHMARKS) -> None:
    """Put ``section`` (starting with ``## <heading>``) in place of the section of that heading in
    ``path``, or append it when there is none; the other sections stay as they are, and so do
    the old section's notes from its :data:`NOTES` line on."""
    text = path.read_text() if path.exists() else "# Benchmarks\n"
    section = section.rstrip("\n") + "\n"
    start = text.find(f"## {heading}")
    if start >= 0:
        end = text.find("\n## ", start + 1)
        old = text[start:] if end < 0 else text[start:end + 1]
        if NOTES in old and NOTES not in section:
            section += "\n" + old[old.index(NOTES):].rstrip("\n") + "\n"
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


def serial_then_executor(run, executor: str, compile_cache: bool):
    """Run ``run(executor)`` (returning ``(result, wall s, CPU s)``) first serially, then on a
    fresh ``executor``; the executor's wall time includes starting its workers.

    With ``compile_cache`` each side starts from an empty persistent compilation cache of its
    own (temporary directories), the executor's shared by its workers, the first job alone.
    Returns ``(serial result, serial wall s, serial CPU s, executor result, executor wall s,
    of which s starting the workers)``."""
    with tempfile.TemporaryDirectory() as caches:
        options = {}
        if compile_cache:
            use_compile_cache(Path(caches) / "serial")
            options["compile_cache"] = Path(caches) / executor
        serial, t_serial, cpu_serial = run("serial")
        print(f"serial: {t_serial:.0f} s ({cpu_serial / t_serial:.2f} CPU s per s)", flush=True)
        t = time.perf_counter()
        with get_executor(executor, **options) as ex:
            t_start = time.perf_counter() - t
            parallel, t_par, _ = run(ex)
        t_par += t_start
    print(f"{executor}: {t_par:.0f} s (of which {t_start:.0f} s starting the workers)")
    return serial, t_serial, cpu_serial, parallel, t_par, t_start
