"""``--version`` and every subcommand's ``--help``: a description, defaults and examples."""

from __future__ import annotations

import argparse
import importlib.metadata
import subprocess
import sys

import pytest

import trackpoint as tp
from trackpoint.cli import main
from trackpoint.cli._main import parser


def _commands() -> dict[str, argparse.ArgumentParser]:
    (action,) = [a for a in parser()._actions if isinstance(a, argparse._SubParsersAction)]
    return dict(action.choices)


@pytest.mark.slow  # the CLI in a child process: seconds
def test_version() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "trackpoint", "--version"], check=False, capture_output=True, text=True
    )
    assert result.returncode == 0
    assert result.stdout == f"trackpoint {tp.__version__}\n"
    assert tp.__version__ == importlib.metadata.version("trackpoint")


def test_every_command_is_covered() -> None:
    assert sorted(_commands()) == [
        "average",
        "convert",
        "demo",
        "diff",
        "inspect",
        "merge",
        "report",
        "rewrite",
        "tree",
        "verify",
    ]


@pytest.mark.parametrize("name", sorted(_commands()))
def test_help_has_a_description_defaults_and_an_example(capsys, name: str) -> None:
    command = _commands()[name]
    with pytest.raises(SystemExit) as info:
        main([name, "--help"])
    assert info.value.code == 0
    text = " ".join(capsys.readouterr().out.split())  # wrapping aside
    assert command.description and " ".join(command.description.split()) in text
    assert "examples: trackpoint " + name in text
    for action in command._actions:
        if action.option_strings and all(action.default is not v for v in (None, False, argparse.SUPPRESS)):
            assert f"(default: {action.default})" in text, action.option_strings
    for action in command._actions:
        assert action.help, action.dest


def test_the_demo_says_where_it_writes_by_default(capsys) -> None:
    with pytest.raises(SystemExit):
        main(["demo", "--help"])
    assert "(default: a new temporary directory)" in " ".join(capsys.readouterr().out.split())
