"""A usage error names the closest options of the command it was given to and prints that
command's usage (issue 27, item 9), still in one line, exit 2."""

from __future__ import annotations

import argparse

import pytest

from clawtower.cli.common import CommandParser
from clawtower.cli.main import build_parser, main


@pytest.mark.parametrize(("argv", "hint"), [
    (["task", "list", "--phaze", "x"], "clawtower: error: unrecognized arguments: --phaze x"
     " (did you mean --phase?); usage: clawtower task list [-h] [--db PATH] [--phase P]"
     " [--json]\n"),
    (["approvals", "--jsn"], "(did you mean --json?); usage: clawtower approvals [-h]"),
    (["session", "show", "S-1", "--jason"], "; usage: clawtower session show [-h]"),
    (["approvals", "--zzzzzz"], "unrecognized arguments: --zzzzzz; usage: clawtower approvals"),
    (["meeting", "show", "M-1", "--jsno"], "(did you mean --json?); usage: clawtower meeting show"),
    (["flow", "run", "--max-dpth", "3", "a", "b"], "(did you mean --max-depth?); usage:"
     " clawtower flow run [-h]"),
    (["task", "show"], "clawtower task show: error: the following arguments are required: ID;"
     " usage: clawtower task show [-h]"),
    (["workflow", "nope"], "invalid choice: 'nope' (choose from"),
    (["tsk", "list"], "invalid choice: 'tsk' (did you mean 'task'?; choose from 'demo'"),
    (["task", "lst"], "clawtower task: error: argument ACTION: invalid choice: 'lst' (did you"
     " mean 'list'?; choose from"),
])
def test_unknown_option_hints(argv: list[str], hint: str,
                              capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and hint in err, err


def _parsers(parser: argparse.ArgumentParser) -> list[argparse.ArgumentParser]:
    found = [parser]
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                found += _parsers(sub)
    return found


def test_every_command_parser_gives_usage_and_hints() -> None:
    """Every command and subcommand is a CommandParser: its usage errors are the one line
    with the closest option and its usage (a plain ArgumentParser would print two lines)."""
    parsers = _parsers(build_parser())
    assert len(parsers) > 100
    plain = [p.prog for p in parsers if not isinstance(p, CommandParser)]
    assert plain == []
