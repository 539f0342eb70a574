"""bayes-scaling: probabilistic Bayesian scaling laws for continual and multilingual pre-training.

Public surface (DESIGN.md): ``bs.laws``, ``bs.fit_map``, ``bs.fit_posterior``, ``bs.metrics``,
``bs.datasets``, ``bs.data``. JAX runs in float64 inside the package (set on import).
"""
import jax as _jax

from scaleout import use_fast_compile as _use_fast_compile
from scaleout import use_user_compile_cache as _use_user_compile_cache

_jax.config.update("jax_enable_x64", True)
#: Whether this process compiles with XLA's older CPU fusion emitter (about 0.7x the compile time,
#: the same run time; ``scaleout.FAST_COMPILE_XLA``): set on import unless JAX has started, the
#: user chose the option in ``XLA_FLAGS``, or ``BAYES_SCALING_XLA_DEFAULTS=1``.
fast_compile = _use_fast_compile("BAYES_SCALING_XLA_DEFAULTS")
#: Where this process keeps the programs JAX compiles, so that the next process loads them instead
#: of compiling (``$XDG_CACHE_HOME/bayes-scaling/jax/<jax release>``); None when the user
#: configured JAX's cache already, set ``BAYES_SCALING_NO_CACHE=1``, or ``filelock`` is missing
#: (docs/scaleout.md, "The compilation cache").
compile_cache_dir = _use_user_compile_cache("bayes-scaling", "BAYES_SCALING_NO_CACHE")

from . import errors, laws  # noqa: E402,F401
from .errors import (BayesScalingError, ConvergenceWarning, DataError, FitError,  # noqa: E402,F401
                     LawError, MultimodalWarning, ParetoKWarning, SignedTargetWarning)
from . import data, datasets, metrics  # noqa: E402,F401
from .fit import MapFit, fit_map, fit_two_phase  # noqa: E402,F401
from .bayes import Posterior, fit_posterior, load_posterior  # noqa: E402,F401
from .compare import compare  # noqa: E402,F401
from . import plots  # noqa: E402,F401
from . import evaluate  # noqa: E402,F401
from . import anchors, plan  # noqa: E402,F401
from . import design, scalebench  # noqa: E402,F401

__version__ = "0.1.0"
