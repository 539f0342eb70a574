"""The Bayesian layer: every law as a NumPyro model, posteriors by NUTS or Laplace, forecasts.

The model (one builder for every law, DESIGN.md rule 1). For a law ``f`` with free parameters
``theta`` and a loss table with rows ``(x_i, L_i)``::

    theta_j ~ prior_j                         (default: weakly informative, from bounds + init range)
    sigma   ~ LogNormal(log 0.01, log 10)     (scale of the log residuals; or fixed)
    log L_i | theta, sigma ~ Huber(log f(theta, x_i), sigma, c)     (or Student-t, or Normal)

with the Huber density of ``bayes_scaling.objective`` (DESIGN.md rule 2):
``log p(r) = -rho_c(r / sigma) - log sigma - log Z(c)``, ``r = log f - log L``. Because
``rho_c(r / sigma) = Huber_{c sigma}(r) / sigma^2``, the log-likelihood is
``-J(theta; delta = c sigma) / sigma^2 + const``: under flat priors and a fixed ``sigma`` the
posterior mode is the ``fit_map`` Huber fit with ``delta = c * sigma``.

Parameterisation. Each parameter is sampled on the real line through its own
:class:`~bayes_scaling.laws.Param` transform (the same one ``fit_map`` optimises in:
scaled logit, log of the excess over a lower bound, ...), with the log-Jacobian added, so NUTS
never leaves the bounds. Priors are distributions on the natural (bounded) value; a prior whose
support is wider than the bounds is truncated to them. NUTS runs on a whitened copy of that space,
``u = u_hat + L z``, where ``u_hat`` is the mode of the unconstrained posterior and ``L L^T`` its
Laplace covariance, so the linear part of the geometry (e.g. ``log A`` against ``alpha``) is
removed before warm-up starts and a dense mass matrix adapts the rest.

The posterior *mode* reported as ``Posterior.map`` is the mode in the natural parameters
(no Jacobian), found with the same multi-start L-BFGS program as ``fit_map``.

References: Carpenter et al. (2017) Stan, for the transform + Jacobian scheme; Vehtari et al.
(2021) "Rank-normalization, folding, and localization" for R-hat and bulk/tail ESS; Vehtari,
Gelman & Gabry (2017) for PSIS-LOO.

Layout (each module one idea; data flows down the list):

- ``distributions``: the Huber density, the flat prior, a prior seen through a Param transform;
- ``likelihood``: the observation model of log losses (the one definition of the likelihood);
- ``priors``: default priors, conditional (:class:`AtReference`) priors, prior draws and tables;
- ``coordinates``: the generic sampling coordinates, and the blocks a model samples in;
- ``spec``: :class:`Spec` (law + priors + likelihood + fixed values) and its densities;
- ``model``: the NumPyro model and the compiled densities;
- ``modes``: MAP, Newton, Laplace; ``nuts``: sampling and diagnostics; ``divergences``: where
  divergent draws sit;
- ``chains``: the modes' weights, modes found by split chains, chains stuck without mass;
- ``intervals``: extrapolation distance, leave-future-out rehearsal, the discrepancy's posterior;
- ``posterior``: :class:`Posterior`, forecasts, save/load; ``discrepancy``: a fixed-tau opt-in;
- ``api``: :func:`fit_posterior`; ``commands``: the CLI entry points.
"""
from ..errors import ConvergenceWarning, MultimodalWarning
from ..laws import Coordinates
from .api import fit_posterior
from .commands import forecast_summary
from .coordinates import choose_blocks, level_coordinates, power_coordinates
from .discrepancy import estimate_discrepancy, with_discrepancy
from .distributions import (HUBER_C, FlatPrior, OnUnconstrained, huber_standard_sample,
                            log_abs_det_jacobian)
from .likelihood import LIKELIHOODS, STUDENT_DF, Observation, log_likelihood, standard_noise
from .model import build_model
from .modes import Mode, map_estimate
from .nuts import BFMI_MIN, ESS_PER_CHAIN, RHAT_MAX, use_chain_devices
from .posterior import Posterior, extrapolation_distance, load_posterior
from .priors import (SCALE, AtReference, default_prior, default_priors, draw_prior, log_scale,
                     plain_priors, prior_given, prior_loc_scale, prior_order, prior_table)
from .spec import Spec, data_pytree, make_spec
from .terms import term_coordinates


__all__ = [
    "AtReference", "BFMI_MIN", "ConvergenceWarning", "Coordinates", "ESS_PER_CHAIN", "FlatPrior",
    "HUBER_C", "LIKELIHOODS", "Mode", "MultimodalWarning", "Observation", "OnUnconstrained",
    "Posterior", "RHAT_MAX", "SCALE", "STUDENT_DF", "Spec", "build_model", "choose_blocks",
    "data_pytree", "default_prior", "default_priors", "draw_prior", "estimate_discrepancy",
    "extrapolation_distance", "fit_posterior", "forecast_summary",
    "huber_standard_sample",
    "level_coordinates", "load_posterior", "log_abs_det_jacobian", "log_scale",
    "log_likelihood", "make_spec", "map_estimate", "plain_priors", "power_coordinates",
    "prior_given", "prior_loc_scale", "prior_order", "prior_table", "standard_noise",
    "term_coordinates",
    "use_chain_devices", "with_discrepancy",
]
