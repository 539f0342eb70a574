"""``analyses/scalebench_peer_record.py``: the runs the benchmark's MSPE code bought, per
checkpoint, are those its own bookkeeping fits at that checkpoint (a checkpoint the pilot reaches
gets the pilot, one a later purchase reaches everything before that purchase)."""
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "analyses"))

from scalebench_peer_record import checkpoint_runs  # noqa: E402


def test_each_checkpoint_gets_the_runs_of_the_fit_the_peer_keeps_there():
    cost = {0: 1.0, 1: 1.0, 2: 3.0, 3: 5.0, 4: 50.0}
    # pilot 0, 1 (2% of 100), then 2 (5%), then 3 (10%)
    runs = checkpoint_runs([0, 1, 2, 3], 2, cost, 100.0, [0.01, 0.05, 0.1])
    assert runs == {0.01: [0, 1], 0.05: [0, 1], 0.1: [0, 1, 2]}
    # a checkpoint never reached keeps every purchase
    runs = checkpoint_runs([0, 1, 2], 2, cost, 1000.0, [0.001, 0.01])
    assert runs == {0.001: [0, 1], 0.01: [0, 1, 2]}
    # one purchase can pass two checkpoints: both get the fit before it
    runs = checkpoint_runs([0, 2, 4], 1, cost, 100.0, [0.01, 0.05, 0.5])
    assert runs == {0.01: [0], 0.05: [0, 2], 0.5: [0, 2]}
