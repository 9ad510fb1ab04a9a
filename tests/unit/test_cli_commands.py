"""``stead`` builds only the command it runs: the same command line gets the same
command, options and help as from the whole app; anything else gets the whole app."""

from __future__ import annotations

import pytest
from typer.main import get_command
from typer.testing import CliRunner

from stead.cli import app, for_command


def _names(args: list[str]) -> list[str]:
    command = get_command(for_command(args))
    return sorted(getattr(command, "commands", {}))


@pytest.mark.parametrize(
    ("args", "built"),
    [
        (["serve", "--port", "1"], ["serve"]),
        (["exec", "sesn_1", "--", "ls"], ["exec"]),
        (["keys", "list"], ["keys"]),
        (["sandbox-host", "status"], ["sandbox-host"]),
    ],
)
def test_a_command_line_builds_only_its_command(args: list[str], built: list[str]) -> None:
    assert _names(args) == built


@pytest.mark.parametrize("args", [[], ["--help"], ["--version"], ["bogus"], ["Serve"]])
def test_anything_else_gets_the_whole_app(args: list[str]) -> None:
    assert for_command(args) is app


@pytest.mark.parametrize(
    "args",
    [["serve", "--help"], ["keys", "--help"], ["keys", "create", "--help"], ["demo", "--help"]],
)
def test_a_command_s_help_is_the_same_as_from_the_whole_app(args: list[str]) -> None:
    whole = CliRunner().invoke(app, args)
    focused = CliRunner().invoke(for_command(args), args)
    assert focused.exit_code == whole.exit_code == 0
    assert focused.output == whole.output


def test_a_wrong_option_is_refused_as_by_the_whole_app() -> None:
    whole = CliRunner().invoke(app, ["serve", "--bogus"])
    focused = CliRunner().invoke(for_command(["serve"]), ["serve", "--bogus"])
    assert focused.exit_code == whole.exit_code == 2
    assert focused.output == whole.output
