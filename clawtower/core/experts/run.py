"""Run one process of an installed expert: what `clawtower expert run` and every trigger
invocation do (one code path, so a trigger runs a process exactly as the CLI does)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from ..errors import ValidationError
from ..limits import check_process_inputs
from ..store.interface import Store, WriteTx
from . import home, state
from .package import Package, load_package


def load_process(name: str, process: str) -> Package:
    """The installed package `name`, checked to have `process` (ValidationError if not)."""
    pkg = load_package(home.package_dir(name))
    if process not in pkg.processes:
        raise ValidationError(f"{name}: no process {process!r} (has:"
                              f" {', '.join(pkg.processes)})")
    return pkg


async def run_process(store: Store, name: str, process: str, inputs: Mapping[str, Any], *,
                      by: str, env: Mapping[str, str] | None = None,
                      on_start: Callable[[WriteTx, str], None] | None = None,
                      actor: str = "operator") -> dict[str, Any]:
    """Compile and run `process` as a new isolated session; returns the run's envelope.

    `on_start(tx, run_id)` runs inside the transaction that starts the workflow run (a
    trigger links its invocation to the run atomically); `env` adds to what steps see;
    `actor` starts the run (the demo's own runs are started by the demo)."""
    from ..workflows.service import Workflows

    pkg = load_process(name, process)
    check_process_inputs(dict(inputs))  # refused before anything starts, naming the input
    home.init_state(pkg)
    if pkg.section("learning").get("enabled") is True:
        from .learning import project

        await project(store, pkg, home.workspace(pkg.name))  # approved since last run
    await state.sync(store, pkg, home.workspace(pkg.name), by=by)
    path = home.compiled_for_run(pkg, process)

    def started(tx: WriteTx, run_id: str) -> None:
        # a run is an isolated session: its session-scoped state is this run's notes alone
        # (an event in the commit that starts it, the files rebuilt from the events), so
        # runs in parallel never reset or mix each other's, and no file is copied over
        state.reset_in(tx, pkg, by, run_id)
        if on_start is not None:
            on_start(tx, run_id)

    wf_env = None
    if env:
        import os

        wf_env = {**os.environ, **env}
    envelope = await Workflows(store, env=wf_env, actor=actor).run(str(path), dict(inputs),
                                                      on_start=started)
    await state.sync(store, pkg, home.workspace(pkg.name), by=by)
    return envelope
