"""Record the runs the benchmark's own MSPE or V-opt code buys, for ``analyses/scalebench.py
--rescore-peer``.

The benchmark's ``mspe.py`` and ``vopt.py`` (arXiv 2604.22753; its repository, MIT) report only
their own running fit at each budget checkpoint. This script imports one unchanged, from its own
checkout and environment (numpy, scipy, pandas, pyarrow; it does not import bayes_scaling), runs its
``run_one`` per (law, repeat, group) exactly as its ``__main__`` does, and keeps the order in which
it bought runs: the list its pilot (``cheap_init``) returns is the one ``run_one`` appends every
later purchase to, so holding it is enough. Nothing in the method is changed.

A checkpoint ``b`` gets what ``run_one`` gives it: the pilot's fit if the pilot alone spent ``b``
of the pool's total cost, else the fit before the purchase that first brought the spent cost to
``b``, or the last fit if the budget never reached ``b``. Its runs are recorded the same way.

    /path/to/peer-env/bin/python analyses/scalebench_peer_record.py PEER_DIR \\
        farseer_scaling_law --repeats 10 [--laws sl_1] [--method vopt]
    # -> analyses/out/scalebench/peer/<method>_<task>.jsonl, one line per (law, repeat), resumable

Each line: ``dataset``, ``law``, ``seed`` (the repeat's: 42 + repeat, the code's ``RNG_SEED``),
``groups`` (per group: ``group``, ``selected`` {checkpoint: pool indices}, ``theta``
{checkpoint: its own fit}), ``seconds``.
"""
from __future__ import annotations

import argparse
import importlib
import json
import sys
import time
from pathlib import Path

OUT = Path(__file__).resolve().parent / "out" / "scalebench" / "peer"


def checkpoint_runs(order, n_pilot, cost, total, checkpoints):
    """``{b: purchases}``: for each checkpoint ``b``, the runs bought before the step (each
    purchase after the pilot is one step) that first brought the spent share to ``b``; the pilot's
    runs when the pilot alone reached it; all of them when nothing did. Mirrors ``run_one``'s
    bookkeeping: a checkpoint the pilot reaches gets the pilot's fit, one a later purchase reaches
    the fit before that purchase."""
    steps = [list(order[:n_pilot])] + [[i] for i in order[n_pilot:]]
    out, bought, spent = {}, [], 0.0
    for k, step in enumerate(steps):
        before = list(bought)
        bought += step
        spent += float(sum(cost[i] for i in step))
        for b in checkpoints:
            if b not in out and spent / total >= b:
                out[b] = list(bought) if k == 0 else before  # the pilot's own fit, else the last
    for b in checkpoints:
        out.setdefault(b, list(bought))
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("peer_dir", help="the benchmark's checkout (holds mspe.py, vopt.py and "
                    "benchmark/)")
    ap.add_argument("task")
    ap.add_argument("--repeats", type=int, default=10)
    ap.add_argument("--laws", default=None, help="law ids, comma-separated (default: all)")
    ap.add_argument("--method", choices=("mspe", "vopt"), default="mspe",
                    help="the benchmark's script to run (default mspe)")
    a = ap.parse_args(argv)

    peer = Path(a.peer_dir).resolve()
    sys.path.insert(0, str(peer))
    sys.argv = [f"{a.method}.py", a.task, str(a.repeats)]
    script = importlib.import_module(a.method)  # both scripts share this structure

    pilots = []
    cheap_init = script.cheap_init

    def recording_cheap_init(*args, **kw):
        chosen = cheap_init(*args, **kw)
        pilots.append((chosen, len(chosen)))  # run_one appends later purchases to this list
        return chosen

    script.cheap_init = recording_cheap_init

    OUT.mkdir(parents=True, exist_ok=True)
    path = OUT / f"{a.method}_{a.task}.jsonl"
    done = set()
    if path.exists():
        for line in path.read_text().splitlines():
            if line.strip():
                r = json.loads(line)
                done.add((r["law"], int(r["seed"])))
    wanted = set(a.laws.split(",")) if a.laws else None
    for task_obj in script.load_tasks_for_dataset(a.task):
        if wanted is not None and task_obj.sl_id not in wanted:
            continue
        checkpoints = task_obj.budget_checkpoints or script.DEFAULT_CHECKPOINTS
        script.CHECKPOINTS = checkpoints
        for rep in range(a.repeats):
            seed = script.RNG_SEED + rep
            if (task_obj.sl_id, seed) in done:
                continue
            t0 = time.time()
            groups = []
            for gi, gd in enumerate(task_obj.groups):
                script.setup_task(task_obj, gi)
                pilots.clear()
                thetas = script.run_one(seed, verbose=False)
                order, n_pilot = pilots[0]
                runs = checkpoint_runs([int(i) for i in order], n_pilot, script.cost_train,
                                       script.total_cost, checkpoints)
                groups.append({"group": str(gd.group),
                               "selected": {str(b): runs[b] for b in checkpoints},
                               "theta": {str(b): [float(v) for v in thetas[b]]
                                         for b in checkpoints}})
            rec = {"dataset": a.task, "law": task_obj.sl_id, "seed": seed, "groups": groups,
                   "seconds": round(time.time() - t0, 1)}
            with path.open("a") as f:
                f.write(json.dumps(rec) + "\n")
            print(f"{task_obj.sl_id} seed {seed}: "
                  + ", ".join(f"{b}: {len(groups[0]['selected'][str(b)])} runs"
                              for b in checkpoints) + f" ({rec['seconds']} s)", flush=True)


if __name__ == "__main__":
    main()
