"""Small GPT-2 training runs that produce loss tables (see ``python -m training --help``).

The loss table (canonical columns of the project's DESIGN.md, ``training.tables``) is the only
contract with the scaling-law code: nothing here knows about the laws. Data flows one way:

* ``cli`` -> ``sweep`` (the driver: load a config, plan, run the pending jobs through
  ``execute``, the one seam to workers) -> ``kinds`` (the registry of sweep families and job
  kinds) -> ``pretrain`` (PTPP pre-training and continual pre-training) and ``m3`` (M3 runs);
* both kinds use ``config`` (shared keys, ``DEFAULTS``, validation, spec hashes), ``runner`` (what
  every job does around its training loop), ``loop`` (the training loop), ``model`` (the GPT-2
  shapes, ``CONTEXT``, parameter counts, M3 model scale) and ``corpora`` (the texts);
* ``store`` (the SQLite results store and CSV export) formats rows with ``tables``.
"""
from .cli import main as cli_main  # noqa: F401
