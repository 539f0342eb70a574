"""The law library: ``names()``, ``get(name)``, and the :class:`Law`/:class:`Param` specs.

Importing this package registers every law: the PTPP paper's (``dcpt``, ``ptpp_floor``,
``ptpp_gated``, ``ptpp_gated_floor``) and the M3 paper's (``chinchilla``, ``he``, ...).
"""
from ._spec import Coordinates, Law, Param, get, names, register  # noqa: F401
from . import ptpp  # noqa: F401  (registers the PTPP-paper laws)
from . import m3  # noqa: F401  (registers the M3-paper laws and its two-stage baselines)

__all__ = ["Coordinates", "Law", "Param", "get", "names", "register"]
