"""The result object :class:`Posterior` (draws, diagnostics, forecasts) and its persistence."""
from __future__ import annotations

import json
import warnings
from dataclasses import dataclass, field

import jax
import jax.numpy as jnp
import numpy as np
import pandas as pd

from .. import data as _data
from ..errors import BayesScalingError, ConvergenceError, ConvergenceWarning, DataError
from ..laws import Law
from ..programs import Programs
from .expansion import Expansion, expansion_scale
from .intervals import (
    FittedRange,
    extrapolation,
    fitted_table,
    grid_distance,
    input_columns,
    rehearse,
    sample_discrepancy,
    signature_grid,
)
from .predictive import observation_draws
from .spec import Spec


def _draw_keys(seed):
    """``(noise key, discrepancy key)`` of a forecast's draws at ``seed``: the observation noise
    of :meth:`Posterior.predict_draws` and the normals of :meth:`Posterior.discrepancy_draws`."""
    k_noise, k_disc = jax.random.split(jax.random.PRNGKey(seed))
    return k_noise, k_disc


@dataclass
class Posterior:
    """Posterior draws of a law's parameters, with diagnostics, forecasts and persistence.

    Attributes:
        law: the law.
        idata: ArviZ InferenceData with ``posterior`` (every free parameter and ``sigma``),
            ``sample_stats`` (NUTS), ``log_likelihood`` (``y``: pointwise log density of each
            row's log loss, for LOO), ``observed_data`` (``y = log loss``) and ``constant_data``
            (the law's input columns).
        map: the posterior mode in natural coordinates (every parameter, fixed ones included,
            and ``sigma``).
        diagnostics: max R-hat, min bulk/tail ESS, divergences, BFMI, tree-depth hits (NUTS) or
            the Pareto k of the Laplace approximation, each with its threshold.
        modes: distinct local modes found by the optimiser (relative Laplace mass, parameters).
        settings: how it was fitted (law, likelihood, priors, fixed values, sampler settings).
        data_hash: hash of the fitted columns.
        spec: the model as it was sampled, sampling coordinates included (``None`` for a
            posterior loaded from disk).
    """

    law: Law
    idata: object
    map: dict
    diagnostics: dict
    modes: pd.DataFrame
    settings: dict
    data_hash: str
    spec: Spec | None = field(default=None, repr=False)

    # --- convergence -----------------------------------------------------------------------------
    @property
    def ok(self) -> bool:
        """Whether every convergence diagnostic passed (see :attr:`diagnostics`)."""
        return bool(self.diagnostics.get("ok", False))

    @property
    def method(self) -> str:
        return self.settings["method"]

    @property
    def target_shift(self) -> float:
        """The constant ``c`` of a signed target fitted as ``loss + c`` (0 for a loss): the
        posterior's :attr:`law`, draws and fitted table are those of ``loss + c``; its
        forecasts, draws of losses and coverage are of ``loss`` (``fit_posterior``)."""
        return float(self.settings.get("target_shift", 0.0) or 0.0)

    @property
    def param_names(self) -> list[str]:
        return [n for n in self.settings["free"]]

    def summary(self, **kw) -> pd.DataFrame:
        """``az.summary`` of the parameters (mean, sd, HDI, MCSE, ESS, R-hat)."""
        import arviz as az

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return az.summary(self.idata, var_names=self.param_names, **kw)

    def group(self, name: str):
        """One group of :attr:`idata` (an xarray ``Dataset``; ``None`` when it has none). A posterior
        read by :func:`load_posterior` reads its groups from the file one by one, without ArviZ,
        until :attr:`idata` itself is first used (a forecast needs ``posterior`` and
        ``constant_data`` only; importing ArviZ is a second of a command's start-up)."""
        idata = self.__dict__["_idata"]
        if isinstance(idata, SavedGroups):
            return idata.group(name)
        return getattr(idata, name, None)

    def draws(self, name=None):
        """Posterior draws flattened over chains: a dict of arrays (or one array for ``name``)."""
        post = self.group("posterior")
        names = self.param_names if name is None else [name]
        out = {n: np.asarray(post[n]).reshape(-1) for n in names}
        return out if name is None else out[name]

    def _memo(self, key, build):
        """A value computed once per posterior from its draws and table (not saved)."""
        memo = self.__dict__.setdefault("_memo_values", {})
        if key not in memo:
            memo[key] = build()
        return memo[key]

    def _fitted_range(self) -> FittedRange:
        """The fitted table's range in the law's input columns (built once)."""
        return self._memo("range", lambda: FittedRange(fitted_table(self),
                                                       input_columns(self.law)))

    def expansion(self) -> Expansion:
        """The model expansion of the law on the fitted table (``discrepancy="expansion"``;
        :mod:`~bayes_scaling.bayes.expansion`), built once. Its prior scale is
        ``settings["expansion_scale"]``, else :data:`~bayes_scaling.bayes.expansion.EXPANSION_SCALE`
        (:func:`~bayes_scaling.bayes.expansion.expansion_scale`)."""
        return self._memo("expansion", lambda: Expansion(self))

    def _param_draws(self, max_draws=None):
        return self._memo(("param_draws", max_draws), lambda: self._build_param_draws(max_draws))

    def _build_param_draws(self, max_draws):
        d = self.draws()
        fixed = self.settings["fixed"]
        S = len(next(iter(d.values())))
        idx = np.arange(S)
        if max_draws is not None and S > max_draws:
            idx = np.linspace(0, S - 1, max_draws).round().astype(int)
        p = {k: jnp.asarray(v[idx]) for k, v in d.items() if k != "sigma"}
        for k, v in fixed.items():
            p[k] = jnp.full(len(idx), float(v))
        sigma = d["sigma"][idx] if "sigma" in d else np.full(len(idx), self.settings["scale"])
        return p, jnp.asarray(sigma)

    @property
    def status(self) -> str:
        """``"ok"``, or ``"NOT CONVERGED"``: the label of an unconverged posterior's outputs."""
        return "ok" if self.ok else "NOT CONVERGED"

    def _check_use(self, allow_unconverged):
        """Refuse an unconverged posterior unless allowed: by the call, at fit time
        (``settings["allow_unconverged"]``) or by its label (``bayes-scaling posterior
        --allow-unconverged`` keeps it labelled NOT CONVERGED in its ``bayes_scaling_status``)."""
        if self.ok:
            return
        failed = "; ".join(self.diagnostics.get("failed", [])) or "see .diagnostics"
        labelled = str(self.group("posterior").attrs.get("bayes_scaling_status", ""))
        if not (allow_unconverged or self.settings.get("allow_unconverged", False)
                or labelled.startswith("NOT CONVERGED")):
            raise ConvergenceError(
                f"the posterior of {self.law.name} failed its convergence checks ({failed}): its "
                "forecasts would be wrong. Refit it (more warm-up, method='nuts', more informative "
                "priors; see .diagnostics['advice']), or pass allow_unconverged=True to use it, "
                "labelled NOT CONVERGED")
        warnings.warn(f"using a posterior of {self.law.name} that failed its convergence "
                      f"diagnostics ({failed}); its intervals may be wrong", ConvergenceWarning,
                      stacklevel=4)

    # --- predictions -----------------------------------------------------------------------------
    def predict_draws(self, df, kind="mean", *, seed=0, max_draws=None, discrepancy=None,
                      allow_unconverged=False) -> np.ndarray:
        """Predicted loss for every posterior draw and row: an array of shape ``(S, n)``.

        ``kind="mean"``: the law's value ``f(theta_s, x)``; ``"predictive"``: a new observation,
        ``f(theta_s, x) * exp(sigma_s * eps)`` with ``eps`` drawn from the likelihood (Huber,
        Student-t or Normal; seeded by ``seed``). ``max_draws`` thins the draws evenly. Both kinds
        are then multiplied by ``exp(delta)``, the model discrepancy of a row outside the fitted
        range (:mod:`~bayes_scaling.bayes.intervals`, docs/forecasting.md):

        - ``discrepancy="auto"`` (default, unless ``settings["discrepancy"]`` says otherwise):
          ``delta ~ N(mu_s d^p_s, (tau_s d^p_s)^2)`` with ``d`` the
          :func:`extrapolation_distance` and ``(p_s, tau_s, mu_s)`` drawn per posterior draw from
          their posterior given a leave-future-out rehearsal on the training table (computed when
          first needed, cached in ``settings``);
        - ``"calibrated"``: the same, with the rehearsal's residuals first corrected by what the
          same rehearsal reports on replicate tables drawn from the fitted model (its null);
        - a number ``tau``: ``delta ~ N(0, (tau d)^2)``;
        - ``0`` or ``"off"``: no discrepancy (the fitted noise only).

        Rows inside the fitted range (``d = 0``) get exactly the draws of ``discrepancy=0``.
        A draw whose law value at a row is not a positive finite number (a loss is positive, and
        the likelihood lives on ``log L``) is NaN there. A signed target fitted as ``L + c``
        (:attr:`target_shift`) is drawn as ``L + c`` and returned as ``L``.
        A posterior that failed its checks raises :class:`ConvergenceError` unless
        ``allow_unconverged`` (or ``settings["allow_unconverged"]``, stored at fit time).
        """
        return self._draws(df, kind, seed, max_draws, discrepancy, allow_unconverged)[0]

    def _draws(self, df, kind, seed, max_draws, discrepancy, allow_unconverged):
        """``(draws, info)``: :meth:`predict_draws` and a per-row table of the discrepancy used."""
        if kind not in ("mean", "predictive"):
            raise BayesScalingError(f"kind must be 'mean' or 'predictive', got {kind!r}")
        self._check_use(allow_unconverged)
        df = _data.as_rows(df)
        x = _forecast_inputs(self.law, df)
        p, sigma = self._param_draws(max_draws)
        out = np.asarray(_vmapped_law(self.law)(p, x))
        # a loss is positive, and the likelihood lives on log L: a draw whose law value is not
        # positive at a row (an offset drawn below zero beyond the fitted range) forecasts no loss
        out = np.where(out > 0, out, np.nan)
        k_noise, _ = _draw_keys(seed)
        if kind == "predictive":
            out = observation_draws(out, sigma, self.settings["likelihood"], k_noise,
                                    c=self.settings["c"], student_df=self.settings["student_df"])
        factor, info = self.discrepancy_draws(df, out.shape[0], seed=seed,
                                              discrepancy=discrepancy)
        if factor is not None:
            out = out * factor
        if self.target_shift:
            out = out - self.target_shift
        return out, info

    def discrepancy_draws(self, df, n_draws, *, seed=0, discrepancy=None, shared_z=False):
        """The model-discrepancy factor of ``n_draws`` posterior draws at the rows of ``df``.

        ``exp(loc_s(x) + scale_s(x) z_s(x))`` with ``loc = mu_s d^p_s`` and ``scale = tau_s d^p_s``,
        ``(p_s, tau_s, mu_s)`` drawn from the discrepancy's grid posterior along the row's
        signature (docs/forecasting.md, "Posterior of the discrepancy and the forecast mixture");
        a fixed tau: ``loc = 0``, ``scale = tau d``; ``"expansion"``: its location, no normal.
        :meth:`predict_draws` multiplies the law's draws by it. Each signature draws from a
        generator of its own seeded by ``seed``, so a row's ``(loc, scale)`` do not depend on the
        other rows asked with it. ``shared_z``: one normal ``z_s`` per draw for every row (common
        random numbers, the ``z_s`` of a one-row query; :func:`bayes_scaling.plots.common_draws`);
        otherwise one per (draw, row), as :meth:`predict_draws` draws them.

        Returns:
            ``(factor, info)``: an ``(n_draws, len(df))`` array (``None`` when no row leaves the
            fitted range, or the discrepancy is off) and a per-row table: ``extrapolation``,
            ``extrapolated``, ``discrepancy_tau``, ``discrepancy_shift``, ``discrepancy_basis``.
        """
        loc, scale, info = self._discrepancy(df, discrepancy, n_draws, seed)
        if scale is None:
            return None, info
        n = len(info)
        _, key = _draw_keys(seed)
        z = np.asarray(jax.random.normal(key, (n_draws, 1 if shared_z else n)))
        return np.exp(loc + scale * z), info

    def _discrepancy(self, df, discrepancy, n_draws, seed):
        """``(S, n)`` means and sds of the discrepancy term (``None, None`` when none applies) and
        the per-row ``extrapolation``, ``extrapolated``, ``discrepancy_tau``,
        ``discrepancy_shift`` and ``discrepancy_basis``."""
        mode = self.settings.get("discrepancy", "auto") if discrepancy is None else discrepancy
        df = _data.as_rows(df)
        rehearsed = mode in ("auto", "calibrated")
        if not rehearsed and mode not in ("off", "expansion") and not isinstance(mode,
                                                                                 (int, float)):
            raise BayesScalingError(f"discrepancy must be 'auto', 'calibrated', 'expansion', "
                                    f"'off' or a number >= 0 (a fixed tau), got {mode!r}")
        if rehearsed or mode == "expansion":
            d, sigs = self._fitted_range().locate(df)
        else:
            d = extrapolation_distance(self, df)
        n = len(d)
        tau_med, shift, basis = np.zeros(n), np.zeros(n), np.full(n, "", dtype=object)

        def info():
            return pd.DataFrame({"extrapolation": d, "extrapolated": d > 0,
                                 "discrepancy_tau": tau_med, "discrepancy_shift": shift,
                                 "discrepancy_basis": basis})

        if mode == "expansion":  # the whole table moves, inside the fitted range too
            ex, scale = self.expansion(), expansion_scale(self)
            loc = ex.draws(df, scale, n_draws, np.random.default_rng(seed))
            tau_med[:], shift[:] = loc.std(0), np.median(loc, 0)
            basis[:] = ex.describe(scale)
            return loc, np.zeros_like(loc), info()
        if mode == "off" or not mode or not (d > 0).any():
            return None, None, info()
        if not rehearsed:
            if mode < 0:
                raise BayesScalingError(f"a fixed discrepancy tau must be >= 0, got {mode}")
            tau_med[d > 0], basis[d > 0] = float(mode), "fixed tau"
            return 0.0, np.broadcast_to(mode * d, (n_draws, n)), info()
        loc, scale = np.zeros((n_draws, n)), np.zeros((n_draws, n))
        decades = None
        for sig in sorted(set(sigs) - {""}):
            rows = np.flatnonzero(sigs == sig)
            grid = signature_grid(self, sig, calibrated=mode == "calibrated")
            if not grid.get("n_rows", 1) and decades is None:
                decades = self._fitted_range().decades(df)
            dist = grid_distance(grid, d[rows], None if decades is None else decades[rows])
            loc[:, rows], scale[:, rows], tau = sample_discrepancy(  # a generator per signature
                grid, dist, n_draws, np.random.default_rng(seed))
            tau_med[rows] = float(np.median(tau))
            shift[rows] = np.median(loc[:, rows], 0)
            basis[rows] = grid["basis"]
        return loc, scale, info()

    def forecast(self, new_df, interval=0.9, kind="predictive", *, seed=0, discrepancy=None,
                 allow_unconverged=False) -> pd.DataFrame:
        """Posterior forecast at the rows of ``new_df``: mean, median, lower, upper, sd, and how
        far each row extrapolates. ``new_df``: a DataFrame, a Series (one row) or a dict of
        columns (``{"N": 7e10, "D": 1.4e12}``: one row; :func:`bayes_scaling.data.as_rows`).

        ``lower``/``upper`` are the equal-tailed ``interval`` credible bounds. ``kind="mean"``
        gives the interval of the law's value (no observation noise), ``"predictive"`` (default)
        that of a new measured loss. The draws are :meth:`predict_draws` (``discrepancy`` and
        ``allow_unconverged`` as there). Further columns: ``extrapolation`` (the distance ``d``),
        ``extrapolated`` (``d > 0``), ``discrepancy_tau`` (median ``tau`` of the row's draws),
        ``discrepancy_shift`` (median systematic part ``mu d^p`` of the row's log discrepancy: the
        forecast median lies ``exp(shift)`` times the law's), ``discrepancy_basis`` (what they rest
        on), ``nonfinite_draws`` (the share of the row's draws where the law has no finite
        positive value, left out of the summaries with a warning) and ``posterior_status``.
        """
        if not 0 < interval < 1:
            raise BayesScalingError(f"interval must be in (0, 1), got {interval}")
        new_df = _data.as_rows(new_df)
        y, info = self._draws(new_df, kind, seed, None, discrepancy, allow_unconverged)
        bad = ~np.isfinite(y)
        if bad.any():  # a draw where the law has no finite positive value
            warnings.warn(f"{int(bad.any(0).sum())} of {y.shape[1]} forecast rows have draws "
                          f"that are no loss (up to {bad.mean(0).max():.1%} of a row's): the law "
                          "has no finite positive value there; their summaries are over the other "
                          "draws, and column nonfinite_draws gives each row's share", stacklevel=2)
            y = np.where(bad, np.nan, y)
        a = (1 - interval) / 2
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # a row with no finite draw: nan
            q = np.nanquantile(y, [a, 0.5, 1 - a], axis=0)
            mean, sd = np.nanmean(y, 0), np.nanstd(y, 0)
        out = pd.DataFrame({"mean": mean, "median": q[1], "lower": q[0], "upper": q[2], "sd": sd},
                           index=getattr(new_df, "index", None))
        for k in info:
            out[k] = info[k].to_numpy()
        out["nonfinite_draws"] = bad.mean(0)
        out["posterior_status"] = self.status
        return out

    def coverage(self, df, intervals=(0.5, 0.9), kind="predictive", *, seed=0,
                 discrepancy=None, allow_unconverged=False) -> dict:
        """Fraction of the rows of ``df`` whose ``loss`` lies in each central predictive interval
        (draws of :meth:`predict_draws`, ``discrepancy`` and ``allow_unconverged`` as there)."""
        df = _data.as_rows(df)
        if "loss" not in df:
            raise DataError(f"coverage needs the measured 'loss' of each row; the rows have "
                            f"{', '.join(map(str, df.columns))} (post.forecast gives "
                            "intervals without one)")
        y = self.predict_draws(df, kind, seed=seed, discrepancy=discrepancy,
                               allow_unconverged=allow_unconverged)
        obs = np.asarray(df["loss"], float)
        out = {}
        for iv in intervals:
            a = (1 - iv) / 2
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)  # a row with no loss drawn: nan
                lo, hi = np.nanquantile(y, [a, 1 - a], axis=0)
            out[iv] = float(np.mean((obs >= lo) & (obs <= hi)))
        return out

    # --- persistence -----------------------------------------------------------------------------
    def prepare_forecasts(self) -> None:
        """Compute, once, what the posterior's default predictive needs beyond its draws: with
        ``discrepancy`` ``"auto"`` or ``"calibrated"`` (the default), the rehearsal of every
        direction a forecast can leave the fitted range in
        (:func:`~bayes_scaling.bayes.intervals.rehearse`: the law refitted on inner cuts of the
        training table), kept in ``settings["rehearsal"]``; :meth:`save` calls it, so a loaded
        posterior forecasts without fitting anything. (``"calibrated"``'s null replicates and
        the expansion's linear algebra, which fits nothing, are computed when first asked for.)
        """
        mode = self.settings.get("discrepancy", "auto")
        if isinstance(mode, str) and mode in ("auto", "calibrated"):
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # the refits' own warnings; failed cuts are kept
                rehearse(self)

    def save(self, path, prepare: bool = True):
        """Write the posterior as netCDF; the law, settings, MAP, diagnostics and modes go into the
        ``posterior`` group's ``bayes_scaling`` attribute (JSON). With ``prepare`` (default) the
        default predictive's rehearsal is computed first (:meth:`prepare_forecasts`) and saved,
        so the loaded posterior's forecasts fit nothing; ``prepare=False`` saves what has been
        computed so far (the rest is computed when a forecast first needs it)."""
        if prepare:
            self.prepare_forecasts()
        settings = {k: v for k, v in self.settings.items() if not k.startswith("_")}
        if self.settings.get("_discrepancy_axis") is not None:
            warnings.warn("the discrepancy axis (a function) is not saved; pass it again after "
                          "loading with with_discrepancy", stacklevel=2)
        meta = {"law": self.law.name, "law_identity": self.law.identity, "map": self.map,
                "diagnostics": self.diagnostics, "settings": settings, "data_hash": self.data_hash,
                "modes": json.loads(self.modes.to_json(orient="records"))}
        self.idata.posterior.attrs["bayes_scaling"] = json.dumps(meta, default=_json_default)
        self.idata.to_netcdf(str(path))

    def __repr__(self):
        d = self.diagnostics
        status = "ok" if self.ok else "NOT CONVERGED"
        if self.method == "nuts":
            detail = (f"max R-hat {d.get('max_rhat', float('nan')):.3f}, min ESS "
                      f"{d.get('min_ess_bulk', float('nan')):.0f}, {d.get('divergences', 0)} divergences")
        else:
            detail = f"Laplace, Pareto k {d.get('pareto_k', float('nan')):.2f}"
        n = self.group("posterior").sizes
        return (f"Posterior({self.law.name}, {self.settings['likelihood']}, {n['chain']}x{n['draw']} "
                f"draws; {detail}; {status})")


def extrapolation_distance(post, df, axis=None) -> np.ndarray:
    """How far each row of ``df`` lies outside the table ``post`` was fitted on.

    Per coordinate, in log space: the distance beyond the fitted range ``[min, max]``, divided by
    the width of that range (0 inside it; a coordinate that was constant in the fit counts in units
    of 1 in log space); the row's distance is the Euclidean norm over the coordinates. The
    coordinates are the law's input columns (:func:`~bayes_scaling.bayes.intervals.extrapolation`),
    or ``axis(table) -> positive array`` (e.g. epochs ``lambda t: t.D / t.U``) when extrapolation
    happens along a derived quantity (stored by :func:`with_discrepancy` for a fixed ``tau``).
    """
    axis = axis if axis is not None else post.settings.get("_discrepancy_axis")
    df = _data.as_rows(df)
    if axis is None:
        return post._fitted_range().locate(df)[0]
    fitted = fitted_table(post)
    return extrapolation(pd.DataFrame({"axis": np.asarray(axis(fitted), float)}),
                         pd.DataFrame({"axis": np.asarray(axis(df), float)}), ["axis"])[0]


def load_posterior(path, law=None) -> Posterior:
    """Read a posterior written by :meth:`Posterior.save` (pass ``law`` for an unregistered law); a
    law whose definition is not the one the posterior recorded is refused (``Law.from_saved``)."""
    idata = SavedGroups(str(path))
    post = idata.group("posterior")
    if post is None or "bayes_scaling" not in post.attrs:
        raise ValueError(f"{path} holds no posterior written by Posterior.save (no readable "
                         "'posterior' group with its 'bayes_scaling' attribute)")
    meta = json.loads(post.attrs["bayes_scaling"])
    law = Law.from_saved(meta["law"], meta.get("law_identity"), law, str(path),
                         meta["settings"].get("target_shift", 0.0))
    return Posterior(law=law, idata=idata, map=meta["map"],
                     diagnostics=meta["diagnostics"], modes=pd.DataFrame(meta["modes"]),
                     settings=meta["settings"], data_hash=meta["data_hash"])


class SavedGroups:
    """The groups of a saved posterior's InferenceData, each read from the netCDF file by xarray
    when first asked for (:meth:`Posterior.group`); :meth:`load` reads the whole of it with
    ArviZ, which :attr:`Posterior.idata` does on first use."""

    def __init__(self, path: str):
        self.path = path
        self._groups: dict = {}

    def group(self, name: str):
        if name not in self._groups:
            import xarray as xr

            try:
                with xr.open_dataset(self.path, group=name) as ds:
                    self._groups[name] = ds.load()
            except OSError as e:
                if "group not found" not in str(e):
                    raise
                self._groups[name] = None  # the file has no such group
            except ValueError as e:  # not a file any engine reads: the first line says why
                raise ValueError(str(e).splitlines()[0].rstrip(" :,")) from None
        return self._groups[name]

    def load(self):
        import arviz as az

        idata = az.from_netcdf(self.path)
        if self._groups.get("posterior") is not None:  # attributes set since it was read
            idata.posterior.attrs.update(self._groups["posterior"].attrs)
        return idata


def _get_idata(self):
    idata = self.__dict__["_idata"]
    if isinstance(idata, SavedGroups):
        idata = self.__dict__["_idata"] = idata.load()
    return idata


def _set_idata(self, value):
    self.__dict__["_idata"] = value


# ``idata`` stays a dataclass field (the constructor takes it), read through a property so that a
# loaded posterior's file is read by ArviZ only when the InferenceData itself is used
Posterior.idata = property(_get_idata, _set_idata,
                           doc="ArviZ InferenceData (see the class's attributes)")


def _json_default(o):
    if isinstance(o, (np.integer,)):
        return int(o)
    if isinstance(o, (np.floating,)):
        return float(o)
    if isinstance(o, (np.bool_,)):
        return bool(o)
    if isinstance(o, np.ndarray):
        return o.tolist()
    return str(o)


_VMAPPED = Programs(8, "vmapped laws")


def _vmapped_law(law: Law):
    key = (law.name, law.fn, tuple(sorted(law.column_map.items())))
    return _VMAPPED.get(key, lambda: jax.jit(jax.vmap(law.fn, in_axes=(0, None))))


def _forecast_inputs(law: Law, df: pd.DataFrame):
    """The law's inputs from a table of new rows (no ``loss`` needed, and a ``loss`` column is
    not read: a held-out row of a signed target has its own sign), validated."""
    tmp = df.assign(loss=1.0)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*repeat the same.*")
        tmp = _data.validate(tmp, law, min_rows=1)
    return law.inputs(tmp)
