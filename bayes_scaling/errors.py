"""Exceptions raised by bayes_scaling. Every error names what was expected, what was found and the fix."""


class BayesScalingError(Exception):
    """Base class of every error raised by bayes_scaling."""


class DataError(BayesScalingError, ValueError):
    """A loss table does not fit the law it is used with (missing column, bad values, too few rows)."""


class LawError(BayesScalingError, KeyError):
    """Unknown law name or inconsistent law specification."""

    def __str__(self):  # KeyError quotes its message; we want it plain
        return str(self.args[0]) if self.args else ""


class FitError(BayesScalingError, RuntimeError):
    """A fit could not produce a usable result (e.g. every start diverged)."""


class ConvergenceWarning(UserWarning):
    """A posterior failed a convergence diagnostic (R-hat, ESS, divergences, BFMI)."""


class MultimodalWarning(UserWarning):
    """The posterior has several separated modes of comparable height."""


class ParetoKWarning(UserWarning):
    """Some rows have Pareto k > 0.7: PSIS-LOO is unreliable for them."""
