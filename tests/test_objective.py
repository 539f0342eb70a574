import numpy as np
import pytest
from scipy import integrate

from bayes_scaling.objective import huber, huber_logpdf


@pytest.mark.parametrize("c", [0.5, 1.0, 1.345, 3.0])
def test_huber_density_is_normalised(c):
    total, _ = integrate.quad(lambda r: np.exp(float(huber_logpdf(r, 0.7, c))), -60, 60, limit=400)
    assert total == pytest.approx(1.0, abs=1e-8)


def test_likelihood_is_scaled_huber_objective():
    """-log p(r | sigma, c) = Huber_{c sigma}(r) / sigma^2 + const: the MAP is the Huber fit."""
    r = np.linspace(-0.1, 0.1, 41)
    sigma, c = 0.01, 2.0
    lp = np.asarray(huber_logpdf(r, sigma, c))
    h = np.asarray(huber(r, c * sigma)) / sigma**2
    np.testing.assert_allclose(-(lp - lp[20]), h - h[20], rtol=1e-10, atol=1e-12)
