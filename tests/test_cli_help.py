"""`bayes-scaling --help` and every command's --help print (argparse %-formats help strings, so a
bare % in one of them raised TypeError for the whole command line)."""
import argparse

import pytest

from bayes_scaling.cli import build_parser, main


def _commands():
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    return sorted(sub.choices)


def test_top_level_help_lists_every_command(capsys):
    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    for name in _commands():
        assert name in out


@pytest.mark.parametrize("name", _commands())
def test_each_command_help(name, capsys):
    assert main([name, "--help"]) == 0
    assert f"bayes-scaling {name}" in capsys.readouterr().out
