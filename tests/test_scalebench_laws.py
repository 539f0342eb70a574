"""The 31 ScaleBench laws against the benchmark's own reference values (golden.json)."""
import numpy as np
import pandas as pd
import pytest

from bayes_scaling import scalebench as sb

pytestmark = pytest.mark.skipif(
    not sb.data_dir().is_dir(),
    reason=f"ScaleBench data folder {sb.data_dir()} absent (set {sb.ENV_VAR})")

CASES = [(task, law_id) for task in sb.TASKS for law_id in sb.task_laws(task)]


def _predict(law, theta, X):
    X = np.asarray(X, dtype=float)
    columns = {law.column(v): X[:, i] for i, v in enumerate(law.variables)}
    return np.asarray(law(dict(zip(law.param_names, theta)), columns))


def test_every_law_of_every_task_is_here_in_the_benchmark_order():
    assert sum(len(sb.task_laws(t)) for t in sb.TASKS) == 31
    for task in sb.TASKS:
        assert list(sb.task_laws(task)) == list(sb.golden(task)["laws"])


@pytest.mark.parametrize("task,law_id", CASES)
def test_law_matches_golden(task, law_id):
    law = sb.get(task, law_id)
    ref = sb.golden(task)["laws"][law_id]
    assert [[p.lower, p.upper] for p in law.params] == [list(b) for b in ref["bounds"]]
    _, test = sb.load(task)
    for group, g in ref["groups"].items():
        rows = test if group == "all_data" else test[test["group"] == group]
        X_test = rows[[law.column(v) for v in law.variables]].to_numpy()
        checks = [(g["theta_allfit"], g["X_train_first10"], g["pred_train_first10"]),
                  (g["theta_allfit"], X_test, g["pred_test"])]
        checks += [(c["theta"], c["X"], c["pred"]) for c in g["random_theta_checks"]]
        for theta, X, want in checks:
            np.testing.assert_allclose(_predict(law, theta, X), np.asarray(want, float),
                                       rtol=1e-8, atol=0, err_msg=f"{task} {law_id} {group}")


def test_laws_read_the_original_columns_and_name_a_missing_one():
    law = sb.get("vocab_scaling_law", "sl_1")
    assert law.columns == ("non_vocab_parameters", "vocab_size", "num_characters")
    table = pd.DataFrame({"P": [1e8], "vocab_size": [4096.0], "num_characters": [1e9]})
    with pytest.raises(KeyError, match="non_vocab_parameters"):
        law(dict.fromkeys(law.param_names, 1.0), table)
