"""The calibration study gives the same table whichever executor runs its fits."""
import numpy as np
import pandas as pd
import pytest

from bayes_scaling.calibration import calibrate


def chin_grid():
    return pd.DataFrame([{"N": n, "D": d} for n in np.geomspace(2e7, 5e9, 5)
                         for d in np.geomspace(4e8, 2e11, 5)])


@pytest.fixture(scope="module")
def serial():
    return calibrate("chinchilla", chin_grid(), n_datasets=4, method="laplace", seed=3)


def same(a, b):
    drop = ["seconds"]  # wall time per fit is the only column that may differ
    pd.testing.assert_frame_equal(a["table"].drop(columns=drop), b["table"].drop(columns=drop))
    for k in ("coverage_params", "coverage_predictions", "n_fitted", "n_rejected"):
        assert a[k] == b[k], k


def test_local_pool_matches_serial(serial):
    assert serial["n_fitted"] == 4
    same(calibrate("chinchilla", chin_grid(), n_datasets=4, method="laplace", seed=3,
                   executor="local"), serial)


def test_ray_matches_serial(serial, ray_cluster):
    same(calibrate("chinchilla", chin_grid(), n_datasets=4, method="laplace", seed=3,
                   executor="ray"), serial)
