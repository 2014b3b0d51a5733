"""What every command-group module shares: the parser class, the operator's name, the
agents file, and opening the store of `--db`.

A command group is a module with `register(subparsers)`: it adds its parsers with
`subparsers.add_parser(...)` and sets `handler=` on each (`p.set_defaults(handler=fn)`,
`fn(args)` returning an exit code or an awaitable of one). `cli/main.py` lists the modules;
no command module imports `cli.main` (an import-linter contract holds it).

Only what building the parser needs is imported here; each handler imports the core modules
of its own command (start-up: BENCHMARKS.md).
"""

from __future__ import annotations

import argparse
import getpass
import sys
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, NoReturn

from clawtower.core.config import config_path, home

from .stores import cli_store

if TYPE_CHECKING:
    from clawtower.core.agents.registry import AgentSet
    from clawtower.core.store import Store
    from clawtower.core.store.faults import Fault
    from clawtower.core.workers import ComposedEngine

Handler = Callable[[argparse.Namespace], "int | Awaitable[int]"]


def stop_on_signals(stop: Callable[[], object],
                    on_signal: Callable[[int], None] | None = None) -> None:
    """Call `stop` on ctrl+c or SIGTERM (serve and the workers end cleanly), after
    `on_signal(signum)` when given (who says which signal it was). Event loops without signal
    support (add_signal_handler raises NotImplementedError) just go on."""
    import asyncio
    import contextlib
    import signal

    loop = asyncio.get_running_loop()

    def handler(sig: int) -> None:
        if on_signal is not None:
            on_signal(sig)
        stop()

    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError):
            loop.add_signal_handler(sig, handler, sig)


def say_faults(store: Store, write: Callable[[str], None] | None = None) -> None:
    """Say on stderr (or `write`) when the store's writes meet a storage fault and when they
    land again: a long-running command waits through it, and says why it waits."""
    out = write or (lambda text: (sys.stderr.write(text + "\n"), sys.stderr.flush()))

    def told(fault: Fault | None) -> None:
        if fault is not None:
            out(f"clawtower: store {store.path}: {fault.describe()} (the work is kept and goes"
                " on once the store takes writes; ctrl+c leaves it for later)")
        else:
            out(f"clawtower: store {store.path}: writable again")

    store.fault_listeners.append(told)


async def drive_engine(composed: ComposedEngine, until_idle: bool, *,
                       timeout_s: float = 24 * 3600, signals: bool = True) -> bool:
    """Run a built engine (`flow work`, `session run`, `flow run --wait`, `session send`)
    until ctrl+c / SIGTERM (`signals`; without it ctrl+c interrupts as anywhere else), or
    with `until_idle` until every worker is idle (at most `timeout_s`); False when it did not
    get idle or a worker failed (each failure said on stderr)."""
    if signals:
        stop_on_signals(composed.stop)
    ok = True
    say_faults(composed.store)
    if until_idle:
        ok = await composed.run_until_idle(timeout_s)
    else:
        await composed.run()
    for err in composed.errors:
        sys.stderr.write(f"clawtower: warning: {err}\n")
    return ok and not composed.errors


DB_HELP = "store file (default: $CLAWTOWER_HOME/clawtower.db)"


def db_parent() -> argparse.ArgumentParser:
    """A parent parser holding `--db PATH`, for subcommands built with `parents=[...]` (left
    unset when not given, so the top level's --db still counts)."""
    parent = argparse.ArgumentParser(add_help=False)
    parent.add_argument("--db", default=argparse.SUPPRESS, metavar="PATH", help=DB_HELP)
    return parent


class CommandParser(argparse.ArgumentParser):
    """argparse, but usage errors are one line and exit 2, and every command (subcommands
    too: argparse makes them with the parent's class) takes `--db PATH`."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if kwargs.get("add_help", True) and "--db" not in self._option_string_actions:
            self.add_argument("--db", default=argparse.SUPPRESS, metavar="PATH", help=DB_HELP)

    def parse_known_args(self, args: Any = None, namespace: Any = None) -> Any:
        self._argv = list(sys.argv[1:] if args is None else args)
        return super().parse_known_args(args, namespace)

    def error(self, message: str) -> NoReturn:
        """One line: the error, the closest options of an unknown one, and the usage of the
        command it was given to (`...; usage: clawtower task list [-h] [--phase P] ...`)."""
        from .boundary import one_line  # argv may hold anything; the message stays one line

        parser = self._command()
        if message.startswith("unrecognized arguments:"):
            message += self._suggest(parser, message.partition(":")[2].split())
        message = _near_choice(message)
        if message.startswith("the following arguments are required:"):
            message += self._actions_of(parser, message)
        usage = " ".join(parser.format_usage().split())
        sys.stderr.write(f"{self.prog}: error: {one_line(message)}; {usage}\n")
        raise SystemExit(2)

    def _command(self) -> argparse.ArgumentParser:
        """The deepest (sub)command the words of argv name: for `task list --phaze`, the
        parser of `task list` (argparse reports unknown options from the top one)."""
        parser: argparse.ArgumentParser = self
        for word in getattr(self, "_argv", []):
            subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
            if not subs or word not in subs[0].choices:
                if word.startswith("-"):
                    break
                continue
            parser = subs[0].choices[word]
        return parser

    @staticmethod
    def _actions_of(parser: argparse.ArgumentParser, message: str) -> str:
        """' (one of: list, show, search)': the actions a command given none could take."""
        missing = message.partition(":")[2].replace(",", " ").split()
        subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)
                and str(a.metavar or a.dest) in missing]
        names = [c.dest for c in subs[0]._choices_actions] if subs else []
        return f" (one of: {', '.join(names)})" if names else ""

    @staticmethod
    def _suggest(parser: argparse.ArgumentParser, unknown: list[str]) -> str:
        """' (did you mean --phase?)': the options of `parser` closest to the unknown ones."""
        import difflib

        options = [o for a in parser._actions for o in a.option_strings if o.startswith("--")]
        near = [m for u in unknown if u.startswith("-")
                for m in difflib.get_close_matches(u.partition("=")[0], options, n=1)]
        return f" (did you mean {', '.join(near)}?)" if near else ""


def _near_choice(message: str) -> str:
    """argparse's "invalid choice: 'lst' (choose from 'create', 'list', ...)" with the closest
    choice first: "invalid choice: 'lst' (did you mean 'list'?; choose from ...)"."""
    import difflib
    import re

    m = re.search(r"invalid choice: '([^']*)' \(choose from (.*)\)$", message)
    if not m:
        return message
    choices = re.findall(r"'([^']*)'", m.group(2))
    near = difflib.get_close_matches(m.group(1), choices, n=1)
    if not near:
        return message
    at = message.index("(choose from", m.start()) + 1
    return message[:at] + f"did you mean '{near[0]}'?; " + message[at:]


def operator_name() -> str:
    """Who is acting when no --by is given: $CLAWTOWER_OPERATOR, else the login name; under
    the one name rule (core.limits.check_name), a refusal naming where the name came from.
    A variable set but empty is refused, not skipped: it is what `CLAWTOWER_OPERATOR=$WHO`
    gives when WHO is unset, and acting under the login name instead would be silent."""
    from clawtower.core.errors import ValidationError
    from clawtower.core.limits import check_name

    from .boundary import env_operator

    env = env_operator()
    if env is not None:
        return env
    try:
        user = getpass.getuser()
    except Exception:
        user = ""
    if not user:
        return "operator"
    try:
        return check_name(user, "your login name")
    except ValidationError as exc:
        raise ValidationError(f"{exc}; set $CLAWTOWER_OPERATOR (or --by NAME where the"
                              " command takes one)") from None


def default_agents() -> str | None:
    """The console's simulator script: $CLAWTOWER_HOME/agents.yaml, if there is one."""
    p = home() / "agents.yaml"
    return str(p) if p.exists() else None


def default_agents_file() -> str | None:
    """For the engine and meetings: the project config (clawtower.yaml, which may name real
    providers) if there is one, else the simulator script agents.yaml, else None."""
    path, asked = config_path()
    if asked or path.exists():
        return str(path)
    return default_agents()


CONFIG_HELP = ("the agents file: a project config (clawtower.yaml; may name real providers)"
               " or a simulator script (default: $CLAWTOWER_CONFIG, else"
               " $CLAWTOWER_HOME/clawtower.yaml, else $CLAWTOWER_HOME/agents.yaml, else the"
               " built-in simulator)")


def add_config_option(parser: argparse.ArgumentParser, *legacy: str) -> None:
    """`--config FILE`: the one way to name the agents file, on every command that uses agents.
    `legacy` spellings (older --agents / --agents-file) still work but are not listed."""
    parser.add_argument("--config", dest="config", default=None, metavar="FILE",
                        help=CONFIG_HELP)
    for flag in legacy:
        parser.add_argument(flag, dest="config", default=None, metavar="FILE",
                            help=argparse.SUPPRESS)


def load_agents(path: str | None) -> AgentSet:
    """The agents of `path` (a config or simulator script), else the built-in simulator."""
    if path:
        from clawtower.core.agents.config import load_agents as load

        return load(path)
    from clawtower.core.agents.registry import AgentSet

    return AgentSet.simulated()


async def with_store(args: argparse.Namespace,
                     fn: Callable[[Store], Awaitable[int]],
                     read_only: bool = False, must_exist: bool = False) -> int:
    """Run `fn` on the store of --db. A `read_only` command never creates it: a missing one
    reads as empty; with `must_exist` it is an error (cli/stores.py)."""
    async with cli_store(args.db, read_only=read_only, must_exist=must_exist) as store:
        return await fn(store)


async def live_lease(store: Store, prefix: str) -> bool:
    """Whether a process holds a live lease named `<prefix>...` (an engine, a session
    worker): what decides whether a command says "it resumes" or names what to run."""
    import time

    row = await store.fetchone("SELECT 1 FROM leases WHERE name LIKE ? AND released=0 AND"
                               " expires_at > ? LIMIT 1", (prefix + "%", time.time()))
    return row is not None


def nothing_yet(what: str, hint: str = "") -> int:
    """The text answer of a listing with nothing in it: `no tasks yet` (with a hint saying
    what makes one), exit 0. Every list says it the same way, on an empty or missing store."""
    print(f"no {what} yet" + (f" ({hint})" if hint else ""))
    return 0

