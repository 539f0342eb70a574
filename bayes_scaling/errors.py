"""Exceptions raised by bayes_scaling. Every error names what was expected, what was found and the fix."""


class BayesScalingError(Exception):
    """Base class of every error raised by bayes_scaling.

    ``python_hint`` is a fix that only applies from Python (e.g. ``law.renamed(...)``): it is part
    of ``str(error)``, and the command line leaves it out (:attr:`message`).
    """

    def __init__(self, *args, python_hint: str = ""):
        super().__init__(*args)
        self.python_hint = python_hint

    @property
    def message(self) -> str:
        """The error without its Python-only hint (what the command line prints)."""
        return str(self.args[0]) if self.args else ""

    def __str__(self):
        return self.message + (f"; {self.python_hint}" if self.python_hint else "")


class DataError(BayesScalingError, ValueError):
    """A loss table does not fit the law it is used with (missing column, bad values, too few rows)."""


class OptionError(BayesScalingError, ValueError):
    """An option is outside its allowed values (e.g. a Huber ``delta`` <= 0, ``n_starts`` = 0, a
    fixed parameter outside its law's bounds)."""


class LawError(BayesScalingError, KeyError):
    """Unknown law name or inconsistent law specification."""


class FitError(BayesScalingError, RuntimeError):
    """A fit could not produce a usable result (e.g. every start diverged)."""


class ParameterError(FitError, OptionError):
    """The fixed parameters of a fit or posterior do not split the law's parameters into fixed and
    free ones (a fixed name the law does not have, every parameter fixed). ``fit_map`` and
    ``fit_posterior`` raise it alike (``bayes_scaling.params.ParamSpace``); it is a
    :class:`FitError` and an :class:`OptionError`, so handlers of either catch it."""


class SplitSkipped(FitError):
    """A protocol's rules rule out fitting a law on a split's training side (e.g. a two-phase
    fit whose phase-1 rows all lie on the test side). ``bs.evaluate.axis_splits`` reports the
    split as skipped, which excludes it for every law."""


class ConvergenceError(FitError):
    """A posterior that failed its convergence checks was used for forecasts without
    ``allow_unconverged=True``."""


class ConvergenceWarning(UserWarning):
    """A posterior failed a convergence diagnostic (R-hat, ESS, divergences, BFMI)."""


class MultimodalWarning(UserWarning):
    """The posterior has several separated modes of comparable height."""


class ParetoKWarning(UserWarning):
    """Some rows have Pareto k > 0.7: PSIS-LOO is unreliable for them."""


class SignedTargetWarning(UserWarning):
    """A loss column is positive on some rows and at or below 0 on others: a signed target (a loss
    minus a baseline) or rows that mark runs not made, which only the user can tell apart."""
