"""bayes-scaling: probabilistic Bayesian scaling laws for continual and multilingual pre-training.

Public surface (DESIGN.md): ``bs.laws``, ``bs.fit_map``, ``bs.fit_posterior``, ``bs.metrics``,
``bs.datasets``, ``bs.data``. JAX runs in float64 inside the package (set on import).
"""
import jax as _jax

_jax.config.update("jax_enable_x64", True)

from . import errors, laws  # noqa: E402,F401
from .errors import (BayesScalingError, ConvergenceWarning, DataError, FitError,  # noqa: E402,F401
                     LawError, MultimodalWarning, ParetoKWarning)
from . import data, datasets, metrics  # noqa: E402,F401
from .fit import MapFit, fit_map, fit_two_phase  # noqa: E402,F401
from .bayes import Posterior, fit_posterior, load_posterior  # noqa: E402,F401
from .compare import compare  # noqa: E402,F401
from . import plots  # noqa: E402,F401
from . import evaluate  # noqa: E402,F401
from . import anchors, plan  # noqa: E402,F401
from . import design, scalebench  # noqa: E402,F401

__version__ = "0.1.0"
