"""The README's "Bring your own law" example: ``python examples/fit_kaplan.py``."""
import my_laws  # noqa: F401  (registers "kaplan"; this file's folder is on the path)

import bayes_scaling as bs

kept = bs.datasets.load("chinchilla_epoch").query("epoch_kept")
fit = bs.fit_map("kaplan", kept, delta=1e-3, n_starts=64, seed=0)
print(fit)
print(", ".join(f"{k}={v:.4g}" for k, v in fit.score(kept).items()))
chinchilla = bs.fit_map("chinchilla", kept, delta=1e-3, n_starts=64, seed=0)
print(f"summed Huber: kaplan {fit.objective:.4g}, chinchilla {chinchilla.objective:.4g}")
