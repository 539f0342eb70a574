"""Run every analysis script in ``analyses/`` and regenerate ``analyses/out/``.

    python analyses/run_all.py            # full run
    python analyses/run_all.py --quick    # fast subset (CI): scripts that accept --quick get it
    python analyses/run_all.py --only replications ptpp_paper

A script is any ``analyses/<name>.py`` with an ``if __name__ == "__main__"`` block, other than
this one and names starting with ``_``. Each
runs in its own interpreter (so one failing script does not stop the others); the exit code is
non-zero when any script failed. ``analyses_main(argv)`` is the same entry as a function (for
``bayes-scaling analyses``).
"""
from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def scripts() -> list[Path]:
    """The analysis scripts, in name order: files with a ``__main__`` block (helper modules
    shared by several scripts have none and are skipped)."""
    return sorted(p for p in HERE.glob("*.py")
                  if p.name != Path(__file__).name and not p.name.startswith("_")
                  and "__name__ == \"__main__\"" in p.read_text())


def analyses_main(argv=None) -> int:
    ap = argparse.ArgumentParser(description="Regenerate analyses/out/ from the bundled data.")
    ap.add_argument("--quick", action="store_true",
                    help="pass --quick to every script that supports it")
    ap.add_argument("--only", nargs="*", default=None, help="script names (without .py)")
    args = ap.parse_args(argv)
    found = scripts()
    if args.only:
        unknown = set(args.only) - {p.stem for p in found}
        if unknown:
            print(f"unknown analyses {sorted(unknown)}; available: {[p.stem for p in found]}",
                  file=sys.stderr)
            return 2
        found = [p for p in found if p.stem in args.only]
    failed = []
    t_all = time.time()
    for path in found:
        cmd = [sys.executable, str(path)]
        if args.quick and '"--quick"' in path.read_text():
            cmd.append("--quick")
        print(f"== {path.name} {' '.join(cmd[2:])}", file=sys.stderr, flush=True)
        t = time.time()
        rc = subprocess.run(cmd, cwd=HERE.parent, stdout=subprocess.DEVNULL).returncode
        print(f"== {path.name}: {'ok' if rc == 0 else f'FAILED (exit {rc})'} in "
              f"{time.time() - t:.0f} s", file=sys.stderr, flush=True)
        if rc != 0:
            failed.append(path.name)
    print(f"== {len(found) - len(failed)} of {len(found)} analyses ok in "
          f"{(time.time() - t_all) / 60:.1f} min; outputs in analyses/out/", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(analyses_main())
