"""Shared pieces of the two ``bible_ptpp`` studies (``anchor_study.py``, ``ptpp_plan.py``).

- :func:`load`: the bundled table as exported (``N`` all parameters, ``N_nonemb`` the
  non-embedding count; datasheet), or a synthetic stand-in with the same columns.
- :func:`nonemb_law`: a registered law reading its model size ``N`` from ``SIZE = "N_nonemb"``
  (its ``column_map``), because the table's ``ptpp`` and ``atpp`` are tokens per non-embedding
  parameter; so ATPP = D / N and FLOPs = 6 N D use the same N.
- :func:`posterior`: ``bs.fit_posterior`` (NUTS, or its Laplace approximation), stated in every
  output; :func:`cached_posterior` reuses a saved one fitted on the same rows.
"""
from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pandas as pd

import bayes_scaling as bs
from bayes_scaling.objective import data_hash

STAGES = (15.0, 31.0, 279.0)
#: The model-size column of the studies: PTPP and ATPP are tokens per non-embedding parameter.
SIZE = "N_nonemb"
#: The synthetic table's sizes: (N_nonemb, N) of the four bible_ptpp models.
SYNTHETIC_SIZES = ((9828, 20580), (25472, 37760), (56640, 75072), (100096, 124672))


def nonemb_law(name: str) -> bs.laws.Law:
    """The registered law ``name`` (same name) reading its variable ``N`` from ``SIZE``."""
    return bs.laws.get(name).renamed(name, N=SIZE)


def load(synthetic: bool = False, seed: int = 0) -> pd.DataFrame:
    """``bible_ptpp`` (or a synthetic table on the same grid, for dry runs)."""
    return synthetic_table(seed) if synthetic else bs.datasets.load("bible_ptpp")


def synthetic_table(seed=0, noise=0.004) -> pd.DataFrame:
    """The bible_ptpp grid (4 sizes, PTPP 15/31/279, replay 0.1/0.25/0.5, ATPP 0.5..32) with losses
    from fixed parameters on the same loss scale (target: Form 3, source: Form 1), plus D = 0 rows
    (source: 3% above the law's converged source-only loss)."""
    rng = np.random.default_rng(seed)
    rows = []
    for i, (n, total) in enumerate(SYNTHETIC_SIZES):
        size = {"N": float(total), "N_nonemb": float(n), "size": f"s{i + 1}"}
        for p in STAGES:
            rows.append(dict(size, ptpp=p, D=0.0, replay=np.nan, is_base=True))
            for r in (0.1, 0.25, 0.5):
                for a in (0.5, 1, 2, 4, 8, 16, 32):
                    rows.append(dict(size, ptpp=p, D=a * n, replay=r, is_base=False))
    grid = pd.DataFrame(rows)
    tgt = nonemb_law("ptpp_gated_floor")
    src = nonemb_law("ptpp_floor")
    tgt_p = dict(E=1.5, A=40.0, alpha=0.35, B=12.0, beta=0.3, nu=0.2, C=0.01, gamma=0.3, lam=0.3,
                 zeta=0.5, F=1.5, eta=0.4)
    src_p = dict(E=1.2, A=40.0, alpha=0.35, B=8.0, beta=0.3, nu=0.2, C=0.05, gamma=0.3, F=1.5, eta=0.4)
    out = []
    for dom, law, p in (("target", tgt, tgt_p), ("source", src, src_p)):
        g = grid.copy()
        g["domain"] = dom
        adapt = g["D"] > 0
        loss = np.empty(len(g))
        loss[adapt.to_numpy()] = np.asarray(law(p, g[adapt]))
        # base rows: the converged-source-only value plus a small gap (target: the r -> 1 forecast)
        base = g[~adapt].assign(D=1e9 * g.loc[~adapt, SIZE], replay=1 - 1e-9)
        loss[(~adapt).to_numpy()] = np.asarray(law(p, base)) * (1.03 if dom == "source" else 1.3)
        g["loss"] = loss * np.exp(noise * rng.standard_normal(len(g)))
        out.append(g)
    return pd.concat(out, ignore_index=True)


def coverage_report(df: pd.DataFrame) -> dict:
    """Which stages, sizes and domains have adaptation rows."""
    a = df[df["D"] > 0]
    return {
        "rows": int(len(df)),
        "stages": sorted(float(p) for p in a["ptpp"].unique()),
        "by_stage": {float(p): int(n) for p, n in a.groupby("ptpp").size().items()},
        "sizes_at_279": sorted(float(n) for n in a.loc[np.isclose(a["ptpp"], 279), SIZE].unique()),
    }


def posterior(law, df, *, seed=0, kind="auto", posterior_kw=None):
    """(posterior, label): ``bs.fit_posterior`` with NUTS (``kind`` "auto" or "nuts") or its
    Laplace approximation (``kind="laplace"``). A posterior that fails its checks stays usable
    (``allow_unconverged=True``): every analysis states the checks (:func:`diagnostics_note`)."""
    kw = {"progress_bar": False, "allow_unconverged": True, **(posterior_kw or {})}
    if kind == "laplace":
        kw["method"] = "laplace"
    elif kind not in ("auto", "nuts"):
        raise ValueError(f"kind must be 'auto', 'nuts' or 'laplace', got {kind!r}")
    return bs.fit_posterior(law, df, seed=seed, **kw), f"bs.fit_posterior ({kw.get('method', 'nuts')})"


def _model_code_hash() -> str:
    """Hash of the package's source: a saved posterior is stale once the model code (priors,
    sampling coordinates, laws) has changed."""
    h = hashlib.sha256()
    for f in sorted(Path(bs.__file__).parent.rglob("*.py")):
        h.update(f.read_bytes())
    return h.hexdigest()[:16]


def cached_posterior(law, df, path, *, seed=0, kind="auto", posterior_kw=None):
    """:func:`posterior`, reusing ``path`` (netCDF) when it was fitted on the same rows and law
    by the same package code."""
    path = Path(path)
    cols = [law.column(v) for v in law.variables if law.column(v) in df] + ["loss"]
    key = {"law": law.name, "rows": int(len(df)), "hash": data_hash(df, cols), "kind": kind,
           "kw": posterior_kw or {}, "seed": seed, "code": _model_code_hash()}
    meta = path.with_suffix(".json")
    if path.exists() and meta.exists() and json.loads(meta.read_text()) == key:
        post = bs.load_posterior(path, law)
        post.settings["allow_unconverged"] = True  # labelled by diagnostics_note
        return post, f"bs.fit_posterior ({post.settings.get('method', 'nuts')}, cached)"
    post, how = posterior(law, df, seed=seed, kind=kind, posterior_kw=posterior_kw)
    post.save(path)
    meta.write_text(json.dumps(key))
    return post, how


def diagnostics_note(post) -> str:
    """One line on a posterior's convergence checks (empty for non-MCMC fallbacks)."""
    diag = getattr(post, "diagnostics", None)
    if not diag:
        return ""
    if diag.get("ok", False):
        return f"{post.law.name}: convergence checks passed"
    return f"{post.law.name}: convergence checks failed ({'; '.join(diag.get('failed', []))})"


def dump(obj, path):
    with open(path, "w") as fh:
        json.dump(obj, fh, indent=1, default=lambda o: o.item() if hasattr(o, "item") else str(o))
