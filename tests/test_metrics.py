import numpy as np
import pytest

import bayes_scaling as bs


def test_score_against_hand_computed_values():
    y = np.array([2.0, 3.0, 4.0])
    yhat = np.array([2.2, 3.0, 3.6])
    r = np.log(yhat / y)  # [0.09531, 0, -0.10536]
    m = bs.metrics.score(y, yhat, delta=0.02)
    # Huber(0.02) of |r| > delta is delta (|r| - delta / 2)
    expect_huber = np.mean([0.02 * (abs(r[0]) - 0.01), 0.0, 0.02 * (abs(r[2]) - 0.01)])
    assert m["huber_log"] == pytest.approx(expect_huber, rel=1e-12)
    assert m["rmse_log"] == pytest.approx(np.sqrt((r[0] ** 2 + r[2] ** 2) / 3), rel=1e-12)
    assert m["mae_rel"] == pytest.approx((0.1 + 0 + 0.1) / 3, rel=1e-12)
    assert m["mape_clip"] == pytest.approx(m["mae_rel"], rel=1e-12)
    # r2 on the original scale: SS_res = 0.04 + 0 + 0.16, SS_tot = 2
    assert m["r2"] == pytest.approx(1 - 0.20 / 2.0, rel=1e-12)


def test_huber_quadratic_region_and_mape_clip():
    y = np.array([1.0, 1.0])
    yhat = np.array([1.01, 0.99])
    r = np.log(yhat)
    assert bs.metrics.huber_log(y, yhat, 0.02) == pytest.approx(np.mean(0.5 * r**2), rel=1e-12)
    # clipping only matters for y below y_clip
    assert bs.metrics.mape_clip([1e-4], [2e-4], y_clip=1e-3) == pytest.approx(0.1)
    assert bs.metrics.mae_rel([1e-4], [2e-4]) == pytest.approx(1.0)


def test_calibration_recovers_known_line():
    yhat = np.linspace(1.5, 4.0, 20)
    y = np.exp(0.1 + 0.9 * np.log(yhat))
    a, b = bs.metrics.calibration(y, yhat)
    assert a == pytest.approx(0.1, abs=1e-12) and b == pytest.approx(0.9, abs=1e-12)


def test_metrics_reject_bad_values_naming_rows():
    with pytest.raises(bs.DataError, match=r"rows \[1\]"):
        bs.metrics.score([2.0, np.nan, 3.0], [2.0, 2.0, 3.0], delta=0.02)
    with pytest.raises(bs.DataError, match="aligned"):
        bs.metrics.score([2.0, 3.0], [2.0], delta=0.02)
