"""Command line: ``python -m training sweep CONFIG`` and ``python -m training export STORE OUT``."""
from __future__ import annotations

import argparse
import sys

from scaleout import ScaleoutError, add_arguments

from . import sweep
from .config import ConfigError
from .corpora import CorpusError
from .kinds import family
from .store import export


def main(argv: list[str] | None = None) -> int:
    """Entry point; ``argv`` excludes the program name. Returns a process exit code."""
    ap = argparse.ArgumentParser(prog="python -m training", description=__doc__)
    sub = ap.add_subparsers(dest="cmd", required=True)
    sw = sub.add_parser("sweep", help="run or resume the sweep of a TOML config")
    sw.add_argument("config")
    add_arguments(sw, executor=None, workers=1, compile_cache=False)
    sw.add_argument("--out-dir", default=None,
                    help="override the config's out_dir (on a cluster: a path every node reads)")
    sw.add_argument("--export", default=None, help="also write the table to this CSV at the end")
    ex = sub.add_parser("export", help="write a results store to a CSV loss table")
    ex.add_argument("store")
    ex.add_argument("out")
    pl = sub.add_parser("plan", help="list the jobs of a config in execution order")
    pl.add_argument("config")
    args = ap.parse_args(argv)

    try:
        if args.cmd == "sweep":
            store = sweep.run_sweep(args.config, args.workers, args.out_dir, args.executor,
                                    ray_address=args.ray_address)
            if args.export:
                print(f"{export(store, args.export)} rows -> {args.export}")
        elif args.cmd == "export":
            print(f"{export(args.store, args.out)} rows -> {args.out}")
        else:
            cfg = sweep.load_config(args.config)
            jobs = sweep.plan(cfg)
            for j in jobs:
                print(f"{j['id']:40s} N_nonemb={j['N_nonemb']:>7d} "
                      f"tokens={sweep.job_tokens(j):>11,d}")
            print(f"{len(jobs)} jobs, {sum(map(sweep.job_tokens, jobs)):,d} training tokens")
            if jobs and family(cfg).summary is not None:
                print(family(cfg).summary(jobs))
    except (ConfigError, CorpusError, ScaleoutError, FileNotFoundError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted; the same command resumes the sweep", file=sys.stderr)
        return 130
    return 0
