"""Small GPT-2 training runs that produce loss tables (see ``python -m training --help``).

The loss table (canonical columns of the project's DESIGN.md) is the only contract with the
scaling-law code: nothing here knows about the laws.
"""
from .cli import main as cli_main  # noqa: F401
