"""Which runs to buy next from a user's own pool: the ``bayes`` criterion on a table of runs, some
done (their loss measured), the rest candidates (docs/design.md, "Your own pool").

    rec = bs.design.recommend(pool, law="chinchilla", cost="6*N*D", targets="N >= 1e9",
                              budget="10%")

The runs done are fitted by least squares from uniform starts in the law's bounds (the refit the
``bayes`` method assumes), their Laplace-mixture posterior (:class:`.posterior.LaplaceMixture`,
noise and discrepancy included) gives each candidate's expected effect on the refit's squared
error at the target rows, and :func:`.acquisition.greedy_refit` buys, per unit cost, the runs
that lower it most, within the budget (the ratio and gain rules, the plan ending lower kept,
:func:`.acquisition.best_rule`). It stops early when no affordable run lowers the expected error.
"""
from __future__ import annotations

import ast
import operator

import numpy as np
import pandas as pd

from ..checks import check_traceable
from ..data import log_scaled, warn_mixed_signs
from ..errors import DataError, FitError, OptionError
from ..laws import Law
from ..laws import get as get_law
from .acquisition import RULES, best_rule, greedy_refit
from .fitting import least_squares, uniform_starts
from .posterior import WORLDS, LaplaceMixture, kernel, log_ratios, overruled
from .task import Group

__all__ = ["COLUMNS", "cost_formula", "recommend", "recommend_figure", "select_rows",
           "split_pool"]

#: Columns of :func:`recommend`'s table beside the candidate's own columns.
COLUMNS = ["step", "row", "cost", "cum_cost", "expected_error_before", "expected_error_after",
           "expected_reduction", "reduction_per_cost", "expected_rmse_after"]
DONE_WORDS = {"1", "1.0", "true", "yes", "y", "done", "x", "run"}
NOT_DONE_WORDS = {"", "0", "0.0", "false", "no", "n", "nan", "none", "todo"}

_BINARY = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
           ast.Div: operator.truediv, ast.Pow: operator.pow}
_UNARY = {ast.USub: operator.neg, ast.UAdd: operator.pos}
_FUNCS = {"log": np.log, "log10": np.log10, "exp": np.exp, "sqrt": np.sqrt}


def cost_formula(formula: str, df: pd.DataFrame) -> np.ndarray:
    """Evaluate an arithmetic ``formula`` of ``df``'s columns, e.g. ``"6*N*D"``: numbers, column
    names, ``+ - * / **``, parentheses and ``log``, ``log10``, ``exp``, ``sqrt``; nothing else is
    evaluated (no attribute, call of another name, subscript or Python code)."""
    try:
        tree = ast.parse(formula.strip(), mode="eval")
    except SyntaxError:
        raise OptionError(f"cost formula {formula!r} is not an arithmetic expression; write e.g. "
                          "'6*N*D' (columns, numbers, + - * / **, log, exp, sqrt)") from None

    def ev(node):
        if isinstance(node, ast.Expression):
            return ev(node.body)
        if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)):
            return float(node.value)
        if isinstance(node, ast.Name):
            if node.id not in df.columns:
                raise DataError(f"cost formula {formula!r} names column {node.id!r}, which the "
                                f"pool does not have (its columns: {', '.join(map(str, df.columns))})"
                                "; fix the formula or add the column")
            return pd.to_numeric(df[node.id], errors="coerce").to_numpy(float)
        if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
            return _BINARY[type(node.op)](ev(node.left), ev(node.right))
        if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
            return _UNARY[type(node.op)](ev(node.operand))
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                and node.func.id in _FUNCS and len(node.args) == 1 and not node.keywords):
            return _FUNCS[node.func.id](ev(node.args[0]))
        raise OptionError(f"cost formula {formula!r}: {ast.unparse(node)!r} is not allowed; use "
                          "columns, numbers, + - * / **, parentheses, log, log10, exp, sqrt")

    with np.errstate(all="ignore"):
        out = ev(tree)
    return np.broadcast_to(np.asarray(out, float), (len(df),)).astype(float)


def run_costs(df: pd.DataFrame, cost, rows=None) -> np.ndarray:
    """Cost of each row: a column name, an arithmetic formula of columns (:func:`cost_formula`),
    a callable ``df -> array`` or an array over ``df``'s rows; every cost of the rows selected by
    the boolean mask ``rows`` (default all) positive and finite, or one error naming the rows."""
    if isinstance(cost, str):
        if cost not in df.columns and cost.isidentifier():  # a bare name means a column
            raise DataError(f"cost column {cost!r} is not in the table (its columns: "
                            f"{', '.join(map(str, df.columns))}); give a column or a formula "
                            "of columns such as '6*N*D'")
        if cost in df.columns:
            raw = df[cost]
            c = pd.to_numeric(raw, errors="coerce").to_numpy(float)
            text = np.flatnonzero(raw.notna().to_numpy() & np.isnan(c))
            if len(text):
                raise DataError(f"cost column {cost!r} holds non-numbers at rows "
                                f"{df.index[text[:10]].tolist()} "
                                f"({raw.iloc[text[:3]].tolist()}); every run needs a positive "
                                "cost: fix those cells")
        else:
            c = cost_formula(cost, df)
        what = f"cost {cost!r}"
    elif callable(cost):
        c, what = np.asarray(cost(df), float), "the cost function"
    else:
        c, what = np.asarray(cost, float), "the costs given"
    c = np.broadcast_to(c, (len(df),)).astype(float)
    rows = np.ones(len(df), bool) if rows is None else np.asarray(rows, bool)
    bad = np.flatnonzero(rows & ~(np.isfinite(c) & (c > 0)))
    if len(bad):
        raise DataError(f"{what} is not a positive number at rows {df.index[bad[:10]].tolist()} "
                        f"({c[bad[:3]].tolist()}); every run needs a positive cost: fix those "
                        "rows or the cost")
    return c


def _truthy(values: pd.Series, column: str) -> np.ndarray:
    if values.dtype == bool:
        return values.to_numpy()
    text = values.astype(str).str.strip().str.lower()
    bad = ~text.isin(DONE_WORDS | NOT_DONE_WORDS)
    if bad.any():
        raise DataError(f"column {column!r} marks runs done with 1/true/yes/done and candidates "
                        f"with 0/false/no or empty; rows {values.index[bad][:10].tolist()} hold "
                        f"{sorted(set(values[bad].astype(str)))[:5]}")
    return text.isin(DONE_WORDS).to_numpy()


def split_pool(pool: pd.DataFrame, loss: str = "loss", done: str | None = None):
    """``(done_rows, candidates)`` of a pool: with ``done`` (a marker column, or a pandas query
    selecting the runs done), the rows it marks (whose ``loss`` must be measured) and the rest
    (whatever their ``loss``); without it, the rows with a ``loss`` and the rows where it is
    empty."""
    if loss not in pool.columns:
        raise DataError(f"the pool has no loss column {loss!r} (its columns: "
                        f"{', '.join(map(str, pool.columns))}); name it with loss=/--loss, and "
                        "leave it empty for the runs not done yet")
    y = pd.to_numeric(pool[loss], errors="coerce")
    text = pool[loss].astype(str).str.strip()
    junk = y.isna() & pool[loss].notna() & (text != "") & (text.str.lower() != "nan")
    if junk.any():
        raise DataError(f"loss column {loss!r} holds non-numbers at rows "
                        f"{pool.index[junk][:10].tolist()} ({sorted(set(text[junk]))[:5]}); "
                        "write the measured loss, or leave it empty for a candidate")
    if done is not None:
        if done in pool.columns:
            is_done = _truthy(pool[done], done)
        else:
            try:
                is_done = np.asarray(pool.index.isin(pool.query(done).index))
            except Exception as e:  # noqa: BLE001  (pandas raises many kinds on a bad query)
                raise DataError(f"done {done!r} is neither a column of the pool nor a pandas "
                                f"query on it ({type(e).__name__}: {e}); its columns: "
                                f"{', '.join(map(str, pool.columns))}") from None
        missing = is_done & ~np.isfinite(y.to_numpy(float))
        if missing.any():
            raise DataError(f"rows {pool.index[missing][:10].tolist()} are marked done in "
                            f"{done!r} but have no {loss!r}; fill in their loss or unmark them")
    else:
        is_done = np.isfinite(y.to_numpy(float))
    if not is_done.any():
        raise DataError(f"no run of the pool is done: no row has a {loss!r} value"
                        + (f" and is marked in {done!r}" if done else "")
                        + "; fill in the loss of the runs already made (at least one, better "
                          "more than the law has parameters)")
    if is_done.all():
        raise DataError(f"every row of the pool is done (has a {loss!r}); add the candidate runs "
                        "with an empty loss")
    return pool[is_done], pool[~is_done]


def _is_candidate(pool, cand) -> np.ndarray:
    return np.asarray(pool.index.isin(cand.index))


def select_rows(pool: pd.DataFrame, loss: str = "loss", done=None, targets=None):
    """``(pool, done_rows, candidates, target_rows)``: :func:`split_pool`, and the target rows
    (a table, or a pandas query on the pool, whose rows are then left out of the candidates:
    a target is forecast, never bought). A pool whose index repeats labels is renumbered."""
    if not isinstance(pool, pd.DataFrame) or pool.empty:
        raise DataError("the pool must be a non-empty table of runs")
    if not pool.index.is_unique:
        pool = pool.reset_index(drop=True)
    done_rows, cand = split_pool(pool, loss, done)
    if isinstance(targets, str):
        try:
            target_rows = pool.query(targets)
        except Exception as e:  # noqa: BLE001  (pandas raises many kinds on a bad query)
            raise OptionError(f"targets query {targets!r} is not a valid pandas query on the pool "
                              f"({type(e).__name__}: {e}); the columns are "
                              f"{', '.join(map(str, pool.columns))}") from None
        if target_rows.empty:
            raise DataError(f"targets query {targets!r} selects no row of the pool; loosen it or "
                            "give a table of target rows")
        cand = cand[~cand.index.isin(target_rows.index)]
        if cand.empty:
            raise DataError(f"every candidate is a target row ({targets!r}); the targets are "
                            "forecast, not bought: add candidates outside them")
    elif isinstance(targets, pd.DataFrame) and len(targets):
        target_rows = targets
    else:
        raise DataError("targets must be a pandas query on the pool or a non-empty table of rows")
    return pool, done_rows, cand, target_rows


def _inputs(law: Law, df: pd.DataFrame, what: str) -> dict:
    try:
        x = {v: np.asarray(a, float) for v, a in law.inputs(df).items()}
    except KeyError as e:
        raise DataError(f"{what}: {e.args[0]}; rename the column or set law.column_map") from None
    for v, a in x.items():
        bad = np.flatnonzero(~np.isfinite(a))
        if len(bad):
            raise DataError(f"{what}: column {law.column(v)!r} is not a finite number at rows "
                            f"{df.index[bad[:10]].tolist()}; fix or drop those rows")
    return x


def recommend(pool: pd.DataFrame, *, law, cost, targets, budget, loss: str = "loss",
              done: str | None = None, n_starts: int = 64, discrepancy: float = 1.0,
              simulate: int = WORLDS, seed: int = 0) -> pd.DataFrame:
    """The next runs to buy from ``pool``, in order, within ``budget``.

    Args:
        pool: one row per run: the law's columns, ``loss`` measured for the runs done and empty
            for the candidates (or a ``done`` marker column).
        law: a :class:`~bayes_scaling.laws.Law` or a registered name.
        cost: a column, an arithmetic formula of columns (``"6*N*D"``, :func:`cost_formula`), a
            callable or an array over the pool's rows.
        targets: the rows whose forecasts matter: a DataFrame with the law's columns, or a pandas
            query selecting rows of ``pool`` (``"N >= 1e9"``; those rows are then not bought).
        budget: the total cost to spend: a number, or a fraction of the candidates' total cost as
            a string ``"10%"``.
        loss, done: the loss column and the optional done-marker column or query
            (:func:`split_pool`).
        n_starts: uniform starts of the least-squares fit of the runs done.
        discrepancy: scale of the law's misfit prior (``bayes``'s ``discrepancy``).
        simulate: worlds drawn from the posterior in which the per-cost and the gain-only
            plans are refitted and compared (``bayes``'s ``simulate``; 0: the plan whose
            linearised criterion ends lower).
        seed: seed of the starts.

    Returns:
        One row per run to buy, in order: :data:`COLUMNS` (``row`` is the pool's index label;
        ``expected_error_*``: expected summed squared error of the refitted law at the targets,
        in squared loss units; ``expected_rmse_after``: its root mean per target row), then the
        candidate's own columns. ``attrs`` holds the budget, the initial expected error, the
        greedy rule kept, the noise variance, the runs done and the candidates' count.
    """
    law = get_law(law)
    check_traceable(law)
    pool, done_rows, cand, target_rows = select_rows(pool, loss, done, targets)
    is_cand = _is_candidate(pool, cand)
    costs = run_costs(pool, cost, is_cand)[is_cand]
    room = _budget(budget, costs, cand)
    x_done = _inputs(law, done_rows, "done runs")
    x_cand = _inputs(law, cand, "candidates")
    x_tgt = _inputs(law, target_rows, "targets")
    y = done_rows[loss].to_numpy(float)
    warn_mixed_signs(done_rows[loss], "the runs done", "they are fitted as they are")
    rng = np.random.default_rng(seed)
    starts = least_squares(law, x_done, y, uniform_starts(law, n_starts, rng))
    if not starts.ok:
        raise FitError(f"law {law.name}: every one of {n_starts} least-squares starts on the "
                       f"{len(y)} runs done failed (non-finite predictions); check the units of "
                       "the law's columns and the loss")
    nd, nt = len(y), len(target_rows)
    rows_x = {v: np.concatenate([x_done[v], x_cand[v]]) for v in law.variables}
    group = Group(name="pool", x=rows_x, y=y, cost=np.concatenate([np.zeros(nd), costs]),
                  x_test=x_tgt, y_test=np.full(nt, np.nan))
    post = LaplaceMixture.from_starts(law, group, np.arange(nd), starts,
                                      discrepancy=discrepancy)
    every = {v: np.concatenate([x_tgt[v], rows_x[v]]) for v in law.variables}
    z = post.z(every)
    modes = list(zip(post.weights, post.jacobians(every), post.cov))
    K = post.disc2 * kernel(z, z)
    spread = post.spread_factor(every)

    def run(power):
        return greedy_refit(modes, nt, nt + np.arange(nd), nt + nd + np.arange(len(cand)), K,
                            post.sigma2, costs, room, spread=spread, cost_power=power)

    rule, (picks, values, v0), final = best_rule(run)
    simulated, typical, criterion = None, None, rule
    if simulate:  # the worlds may overrule the rule kept (docs/design.md)
        others = [r for r in ("ratio", "gain") if r != rule]
        plans = {rule: (picks, values, v0), **{r: run(RULES[r]) for r in others}}
        keys = {}
        for r, p in plans.items():
            keys.setdefault(tuple(sorted(p[0])), r)
        if len(keys) > 1:
            err = post.refit_errors(rows_x, np.arange(nd), [nd + np.array(k, int) for k in keys],
                                    x_tgt, simulate, n_starts, np.random.default_rng(seed + 1))
            rule = list(keys.values())[overruled(err, 0)]
            picks, values, v0 = plans[rule]
            simulated = {r: float(e) for r, e in zip(keys.values(), err.mean(1))}
            # per world, each plan's error over the criterion's plan's (geometric mean)
            typical = {r: float(np.exp(-m)) for r, m in
                       zip(keys.values(), log_ratios(err, 0).mean(1)) if r != criterion}
    out, prev, cum = [], v0, 0.0
    for step, (c, v) in enumerate(zip(picks, values), 1):
        cum += costs[c]
        out.append({"step": step, "row": cand.index[c], "cost": costs[c], "cum_cost": cum,
                    "expected_error_before": prev, "expected_error_after": v,
                    "expected_reduction": prev - v, "reduction_per_cost": (prev - v) / costs[c],
                    "expected_rmse_after": float(np.sqrt(max(v, 0.0) / nt)),
                    **cand.iloc[c].drop(labels=[loss] + ([done] if done else []),
                                        errors="ignore").to_dict()})
        prev = v
    table = pd.DataFrame(out, columns=None if out else COLUMNS)
    table.attrs.update(budget=float(room), initial_error=float(v0), greedy=rule,
                       final_by_rule=final, simulated_by_rule=simulated,
                       simulated_typical_ratio=typical,
                       criterion_rule=criterion,
                       noise_var=float(post.sigma2), n_done=nd,
                       n_candidates=len(cand), n_targets=nt, law=law.name)
    return table


def budget_cost(budget, costs) -> float:
    """A budget as a cost: a positive number, or a share ``"P%"`` of ``costs``' total (the
    candidates'); anything else is one error saying what is accepted."""
    if isinstance(budget, str) and budget.strip().endswith("%"):
        try:
            share = float(budget.strip()[:-1]) / 100
        except ValueError:
            share = float("nan")
        if not 0 < share <= 1:
            raise OptionError(f"budget {budget!r}: a share must be in (0%, 100%]; or give a cost")
        room = share * float(costs.sum())
    else:
        try:
            room = float(budget)
        except (TypeError, ValueError):
            room = float("nan")
        if not (np.isfinite(room) and room > 0):
            raise OptionError(f"budget {budget!r} must be a positive cost or a share such as "
                              "'10%' of the candidates' total cost")
    return room


def _budget(budget, costs, cand) -> float:
    """:func:`budget_cost`, which must afford the cheapest candidate."""
    room = budget_cost(budget, costs)
    cheapest = int(np.argmin(costs))
    if room < costs[cheapest] * (1 - 1e-12):
        raise OptionError(f"budget {room:.4g} buys nothing: the cheapest candidate (row "
                          f"{cand.index[cheapest]!r}) costs {costs[cheapest]:.4g}; raise the "
                          "budget to at least that")
    return room


def recommend_figure(pool: pd.DataFrame, rec: pd.DataFrame, *, law, cost, targets,
                     loss="loss", done=None, path=None):
    """The pool in the plane of the law's first two variables (log axes), or of its variable and
    the run's cost when it reads one: runs done, candidates, the runs recommended (numbered in
    order; runs that differ only in a variable not drawn share one label, "1, 6", and the title
    names those variables) and the target rows (stars; vertical lines on the cost plane).
    Returns the matplotlib Figure; writes a PNG to ``path``."""
    from matplotlib.figure import Figure

    from ..plots import style

    law = get_law(law)
    check_traceable(law)
    pool, done_rows, cand, target_rows = select_rows(pool, loss, done, targets)
    xv = law.variables[0]
    yv = law.variables[1] if len(law.variables) > 1 else None
    cost_of = pd.Series(run_costs(pool, cost, _is_candidate(pool, cand)), index=pool.index)

    def coords(df, cost_known=True):
        x = np.asarray(law.inputs(df)[xv], float)
        if yv is not None:
            return x, np.asarray(law.inputs(df)[yv], float)
        return x, cost_of.loc[df.index].to_numpy() if cost_known else None

    with style():
        fig = Figure(figsize=(6.4, 4.8))
        ax = fig.add_subplot()
        # every row drawn, once: done, candidates, targets (a one-input law: no target cost)
        shown = [coords(done_rows), coords(cand), coords(target_rows, cost_known=yv is not None)]
        ax.scatter(*shown[0], s=18, c="0.5", label=f"done ({len(done_rows)})")
        ax.scatter(*shown[1], s=18, facecolors="none", edgecolors="C0",
                   label=f"candidates ({len(cand)})")
        if len(rec):
            hx, hy = coords(pool.loc[rec["row"]])
            ax.scatter(hx, hy, s=60, c="C3", label=f"recommended ({len(rec)})", zorder=3)
            # runs that differ only in an input not drawn share a point: one label "1, 6"
            steps: dict = {}
            for k, ab in enumerate(zip(hx, hy), 1):
                steps.setdefault(ab, []).append(str(k))
            for (a, b), ks in steps.items():
                ax.annotate(", ".join(ks), (a, b), textcoords="offset points", xytext=(6, 6),
                            fontsize=9, fontweight="bold", color="C3", zorder=5,
                            bbox=dict(boxstyle="round,pad=0.1", fc="white", ec="none",
                                      alpha=0.8))
        if yv is not None:
            ax.scatter(*shown[2], marker="*", s=120, c="k", zorder=4,
                       label=f"targets ({len(target_rows)})")
        else:
            for k, t in enumerate(shown[2][0]):
                ax.axvline(t, color="k", ls="--", lw=0.8,
                           label=f"targets ({len(target_rows)})" if k == 0 else None)
        # log axes for inputs positive on every row drawn; a proportion that may be 0 or a
        # signed input (a log learning rate) on a linear axis, where its points stay visible
        for axis, k in (("x", 0), ("y", 1)):
            if log_scaled(np.concatenate([np.ravel(c[k]) for c in shown if c[k] is not None])):
                getattr(ax, f"set_{axis}scale")("log")
        ax.set_xlabel(law.column(xv))
        ax.set_ylabel(law.column(yv) if yv else "cost")
        hidden = [law.column(v) for v in law.variables[2:]]
        ax.set_title(f"next runs to buy ({law.name})" if not hidden else
                     f"next runs to buy ({law.name}; {', '.join(hidden)} not drawn)")
        ax.legend(loc="best", fontsize=8)
        if path is not None:
            fig.savefig(path, dpi=120, bbox_inches="tight")
    return fig
