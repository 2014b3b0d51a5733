"""Every argument of every command says what it is for in `--help`, and the agents file is
named one way (`--config`) everywhere."""

from __future__ import annotations

import argparse
from collections.abc import Iterator

from clawtower.cli.main import build_parser


def _commands(parser: argparse.ArgumentParser, path: str = "clawtower"
              ) -> Iterator[tuple[str, argparse.ArgumentParser]]:
    yield path, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _commands(sub, f"{path} {name}")


def test_every_argument_has_help_text() -> None:
    missing = []
    for path, parser in _commands(build_parser()):
        for action in parser._actions:
            if isinstance(action, argparse._HelpAction | argparse._SubParsersAction):
                continue
            if action.help is argparse.SUPPRESS:
                continue  # a hidden alias
            if not (action.help or "").strip():
                missing.append(f"{path} {action.option_strings or action.dest}")
    assert missing == []


def test_the_agents_file_is_named_one_way() -> None:
    listed = set()
    for path, parser in _commands(build_parser()):
        for action in parser._actions:
            if action.dest == "config" and action.help is not argparse.SUPPRESS:
                listed.add(tuple(action.option_strings))
            for flag in ("--agents-file", "--agents"):
                if flag in action.option_strings and action.dest == "config":
                    assert action.help is argparse.SUPPRESS, (path, flag)  # old, unlisted
    assert listed == {("--config",)}
