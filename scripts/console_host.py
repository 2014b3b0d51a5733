"""The console as the engine's host, in a child process with no terminal (kill_soak.py's
`--host console`, tests/tui/test_tui_kill.py).

    .venv/bin/python scripts/console_host.py STORE [--until-idle]

Runs the real console (clawtower/tui/app.py's ClawtowerApp, as `clawtower console` opens it,
with its engine: clawtower/tui/workers.py) headless on STORE. Prints `READY` on stdout once
every worker of its engine runs; SIGTERM quits it as `q` would (the workers hand over). With
--until-idle it quits once the engine is idle (nothing can move without a human), printing
`IDLE True` (or `IDLE False` after an hour) first. CLAWTOWER_HOME and the config come from
the environment, as for `clawtower console`.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from clawtower.tui.app import ClawtowerApp


def say(text: str) -> None:
    # Textual captures print() while the app runs: straight to the file descriptor
    os.write(1, f"{text}\n".encode())


def main() -> int:
    db = sys.argv[1]
    until_idle = "--until-idle" in sys.argv[2:]
    tasks: set[asyncio.Task[None]] = set()

    def loaded(app: ClawtowerApp) -> None:
        asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, app.exit)
        task = asyncio.create_task(watch(app))
        tasks.add(task)

    async def watch(app: ClawtowerApp) -> None:
        while True:  # the engine starts just after the load, behind the first paint
            composed = app.workers_engine
            if composed is not None and all(composed.running(w.name)
                                            for w in composed.workers):
                break
            await asyncio.sleep(0.05)
        say("READY")
        if until_idle:
            idle = await composed.until_idle(timeout_s=3600)
            say(f"IDLE {idle}")
            app.exit(return_code=0 if idle else 1)

    app = ClawtowerApp(db, run_engine=True, operator="soak", on_loaded=loaded)
    app.run(headless=True)
    return int(app.return_code or 0)


if __name__ == "__main__":
    raise SystemExit(main())
