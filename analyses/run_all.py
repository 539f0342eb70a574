"""Run every analysis script in ``analyses/`` and regenerate ``analyses/out/``.

    python analyses/run_all.py              # full run, two scripts at a time (one per core)
    python analyses/run_all.py --quick      # fast subset (CI): scripts that accept --quick get it
    python analyses/run_all.py --only replications ptpp_paper
    python analyses/run_all.py --jobs 1     # one script at a time, each free to use every core

A script is any ``analyses/<name>.py`` with an ``if __name__ == "__main__"`` block, other than
this one and names starting with ``_``; the studies in :data:`SEPARATE` (hours on 2 cores) run
only when named with ``--only``. Each runs in its own interpreter (so one failing script
does not stop the others); the exit code is non-zero when any script failed. With ``--jobs N > 1``
the scripts run N at a time, longest first by the durations recorded in
``analyses/out/run_times.json`` (written at the end of every run), and each child is limited to
one compute thread (XLA, BLAS) so that N children share N cores without oversubscription.
``analyses_main(argv)`` is the same entry as a function (for ``bayes-scaling analyses``).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from scaleout import worker_env

HERE = Path(__file__).resolve().parent
TIMES = HERE / "out" / "run_times.json"


#: Studies too long for one ``make analyses`` run: name -> how to run them on their own.
SEPARATE = {"scalebench": "python analyses/scalebench.py --executor local --workers 2 "
                          "(resumable; --summary rewrites summary.md from results.csv)",
            "forecast_honesty": "nice -n 10 python analyses/forecast_honesty.py --executor local "
                                "--workers 2 (127 units, a median 70 s per Laplace fit on a "
                                "loaded 2-core machine, several times that with the rehearsal "
                                "of the default intervals: hours; resumable: one cached result "
                                "per dataset, split, law and predictive; --summary rewrites "
                                "summary.md)",
            "m3_figures": "nice -n 10 python analyses/m3_figures.py [--only SECTION] (figures 2, "
                          "4-9, 13-14, Table 16 and the Pareto front; Table 16 alone is over an "
                          "hour of 50-start fits on 2 cores)"}


def scripts() -> list[Path]:
    """The analysis scripts, in name order: files with a ``__main__`` block (helper modules
    shared by several scripts have none and are skipped)."""
    return sorted(p for p in HERE.glob("*.py")
                  if p.name != Path(__file__).name and not p.name.startswith("_")
                  and "__name__ == \"__main__\"" in p.read_text())


def _recorded() -> dict:
    try:
        return json.loads(TIMES.read_text())
    except (OSError, ValueError):
        return {}


def analyses_main(argv=None) -> int:
    ap = argparse.ArgumentParser(description="Regenerate analyses/out/ from the bundled data.")
    ap.add_argument("--quick", action="store_true",
                    help="pass --quick to every script that supports it")
    ap.add_argument("--only", nargs="*", default=None, help="script names (without .py)")
    ap.add_argument("--jobs", type=int, default=min(2, os.cpu_count() or 1),
                    help="scripts run at once (default: 2, or 1 on a one-core machine)")
    args = ap.parse_args(argv)
    if args.jobs < 1:
        ap.error(f"--jobs must be at least 1, got {args.jobs}")
    found = scripts()
    if args.only:
        unknown = set(args.only) - {p.stem for p in found}
        if unknown:
            print(f"unknown analyses {sorted(unknown)}; available: {[p.stem for p in found]}",
                  file=sys.stderr)
            return 2
        found = [p for p in found if p.stem in args.only]
    else:
        for name, how in SEPARATE.items():
            print(f"== {name}.py is not part of a full run: {how}", file=sys.stderr)
        found = [p for p in found if p.stem not in SEPARATE]
    mode = "quick" if args.quick else "full"
    times = _recorded()
    past = times.get(mode, {})
    queue = sorted(found, key=lambda p: -past.get(p.stem, float("inf")))  # unknown ones first
    env = {**os.environ, **worker_env((os.cpu_count() or 1) / args.jobs)}  # a share of the cores
    running, failed, took = {}, [], {}
    t_all = time.time()
    while queue or running:
        while queue and len(running) < args.jobs:
            path = queue.pop(0)
            cmd = [sys.executable, str(path)]
            if args.quick and '"--quick"' in path.read_text():
                cmd.append("--quick")
            print(f"== {path.name} {' '.join(cmd[2:])}", file=sys.stderr, flush=True)
            running[path] = (subprocess.Popen(cmd, cwd=HERE.parent, env=env,
                                              stdout=subprocess.DEVNULL), time.time())
        time.sleep(0.5)
        for path, (proc, t) in list(running.items()):
            rc = proc.poll()
            if rc is None:
                continue
            del running[path]
            took[path.stem] = round(time.time() - t, 1)
            print(f"== {path.name}: {'ok' if rc == 0 else f'FAILED (exit {rc})'} in "
                  f"{took[path.stem]:.0f} s", file=sys.stderr, flush=True)
            if rc != 0:
                failed.append(path.name)
    minutes = (time.time() - t_all) / 60
    print(f"== {len(found) - len(failed)} of {len(found)} analyses ok in {minutes:.1f} min "
          f"({args.jobs} at a time); outputs in analyses/out/", file=sys.stderr)
    times[mode] = {**past, **took}
    if not args.only and not failed:
        times.setdefault("total_minutes", {})[mode] = {"minutes": round(minutes, 1),
                                                       "jobs": args.jobs,
                                                       "cpus": os.cpu_count()}
    TIMES.parent.mkdir(parents=True, exist_ok=True)
    TIMES.write_text(json.dumps(times, indent=1, sort_keys=True) + "\n")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(analyses_main())
