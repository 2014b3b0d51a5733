"""Regenerate the console's pictures in screenshots/ (SVG, plus PNG when rsvg-convert exists).

    .venv/bin/python scripts/screenshots.py [--out screenshots] [--size 140x40] [--only NAME...]

Seeds a temporary store deterministically (examples/demo specs and agents, speed 0, a
stepping fake clock, seeded approval ids), opens the console headless without an engine,
adds seeded meetings for mode 3, workflow runs for mode 5 and the example expert (its
webhook fired once) for modes 6 and 8, and saves one picture per
mode plus a drill-down, a confirmation, an input gate's JSON editor, two traces' waterfalls
and the light theme.
PNGs need `rsvg-convert` (Debian: librsvg2-bin) and Fira Code (fonts-firacode).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

os.environ["TZ"] = "UTC"  # the demo clock starts at 2027-01-15 08:00:00 UTC
time.tzset()

from textual.pilot import Pilot  # noqa: E402

from clawtower.tui.app import ClawtowerApp  # noqa: E402
from clawtower.tui.seed import seed_demo, seed_meetings, seed_workflows  # noqa: E402

Step = Callable[[Pilot[None], ClawtowerApp], Awaitable[None]]


async def _settle(pilot: Pilot[None]) -> None:
    await pilot.pause()
    await pilot.pause(0.1)


async def tasks(pilot: Pilot[None], app: ClawtowerApp) -> None:
    await _settle(pilot)


async def approvals(pilot: Pilot[None], app: ClawtowerApp) -> None:
    await pilot.press("2")
    await _settle(pilot)


def detail(task_id: str) -> Step:
    async def step(pilot: Pilot[None], app: ClawtowerApp) -> None:
        app.open_task(task_id)
        for _ in range(200):
            await pilot.pause(0.02)
            if getattr(app.screen, "detail", None) is not None:
                break
        await _settle(pilot)

    return step


async def meetings(pilot: Pilot[None], app: ClawtowerApp) -> None:
    await pilot.press("3")
    for _ in range(200):
        await pilot.pause(0.02)
        if getattr(app.screen, "detail", None) is not None:
            break
    await _settle(pilot)


def sessions(key: str) -> Step:
    """Mode 4 with session `key` selected (S-1: a fan-out and its announces; S-5: a steered
    loop resumed from its backlog)."""
    async def step(pilot: Pilot[None], app: ClawtowerApp) -> None:
        await pilot.press("4")
        for _ in range(300):
            await pilot.pause(0.02)
            rows = getattr(app.screen, "rows", [])
            if rows:
                break
        from clawtower.tui.screens.sessions import SessionList

        app.screen.query_one(SessionList).move_cursor_to_key(key)
        for _ in range(300):
            await pilot.pause(0.02)
            detail = getattr(app.screen, "detail", None)
            if detail is not None and detail.get("id") == key:
                break
        await _settle(pilot)

    return step


def session_history(key: str) -> Step:
    """Mode 4's history view (`h`) of session `key`, its last turn selected."""
    async def step(pilot: Pilot[None], app: ClawtowerApp) -> None:
        await sessions(key)(pilot, app)
        await pilot.press("h")
        for _ in range(300):
            await pilot.pause(0.02)
            if getattr(app.screen, "first_read", False) \
                    and getattr(app.screen, "detail", None) is not None:
                break
        await pilot.press("end")
        await _settle(pilot)

    return step


async def seed_session_store(db: str) -> None:
    from clawtower.core import open_store
    from clawtower.core.demo.sessions import seed_sessions

    store = await open_store(db)
    try:
        await seed_sessions(store, live=False)
    finally:
        await store.close()


async def seed_acp_store(db: str) -> None:
    from clawtower.core import open_store
    from clawtower.core.demo.acp import seed_acp
    from clawtower.tui.seed import START, SteppingClock

    store = await open_store(db, clock=SteppingClock(start=START + 7200, step=0.5))
    try:
        await seed_acp(store)
    finally:
        await store.close()


def flows(key: str) -> Step:
    """Mode 7 with node `key` selected (the briefing's figures node: the sub-DAG it
    coordinated, its outbox and its session transcript)."""
    async def step(pilot: Pilot[None], app: ClawtowerApp) -> None:
        await pilot.press("7")
        for _ in range(300):
            await pilot.pause(0.02)
            if getattr(app.screen, "rows", []):
                break
        from clawtower.tui.screens.flows import FlowTree

        app.screen.query_one(FlowTree).move_cursor_to_key(key)
        for _ in range(300):
            await pilot.pause(0.02)
            detail = getattr(app.screen, "detail", None)
            if detail is not None and detail["task"]["task_id"] == key:
                break
        await pilot.press("b")  # the outbox: its TASKs to the fetchers, its REPLY upward
        for _ in range(300):
            await pilot.pause(0.02)
            detail = getattr(app.screen, "detail", None)
            if detail is not None and any(m["kind"] == "REPLY" for m in detail["mail"]):
                break
        await _settle(pilot)

    return step


def trace(select: Step) -> Step:
    """The waterfall `w` opens over the list `select` leaves selected, once it is drawn."""
    async def step(pilot: Pilot[None], app: ClawtowerApp) -> None:
        await select(pilot, app)
        await pilot.press("w")
        for _ in range(500):
            await pilot.pause(0.02)
            if getattr(app.screen, "loaded", False):
                break
        await _settle(pilot)

    return step


async def seed_flow_store(db: str) -> None:
    from clawtower.core import open_store
    from clawtower.core.demo.flows import seed_flows

    store = await open_store(db)
    try:
        await seed_flows(store, ROOT / "examples" / "demo" / "agents.yaml", live=False)
    finally:
        await store.close()


async def seed_expert_store(db: str) -> None:
    """The example expert installed in the home, its webhook fired once: the run waits at
    its confirm gate (modes 6 and 8, and a row in mode 2). On the real clock: mode 8 puts
    the webhook's last fire beside the cron trigger's next fire, which is computed from now."""
    from clawtower.core import open_store
    from clawtower.core.demo.triggers import seed_expert

    store = await open_store(db)
    try:
        await seed_expert(store, by="demo")
    finally:
        await store.close()


def mode(key: str) -> Step:
    """Mode `key` (6 experts, 8 triggers) once it has read what it lists."""
    async def step(pilot: Pilot[None], app: ClawtowerApp) -> None:
        await pilot.press(key)
        for _ in range(300):
            await pilot.pause(0.02)
            if getattr(app.screen, "experts", None) or getattr(app.screen, "triggers", None):
                break
        await _settle(pilot)

    return step


async def acp_permission(pilot: Pilot[None], app: ClawtowerApp) -> None:
    """Mode 2 with a coding harness's permission request (ACP) selected."""
    from clawtower.core.demo.acp import APPROVAL_ID
    from clawtower.tui.views import ApprovalList

    await pilot.press("2")
    await _settle(pilot)
    app.screen.query_one(ApprovalList).move_cursor_to_key(APPROVAL_ID)
    await _settle(pilot)


async def confirm(pilot: Pilot[None], app: ClawtowerApp) -> None:
    await pilot.press("2", "a")
    await _settle(pilot)


async def palette(pilot: Pilot[None], app: ClawtowerApp) -> None:
    await pilot.press("ctrl+p", *"approve")
    await pilot.pause(0.5)
    await _settle(pilot)


async def workflows(pilot: Pilot[None], app: ClawtowerApp) -> None:
    await pilot.press("5")
    for _ in range(200):
        await pilot.pause(0.02)
        if getattr(app.screen, "detail", None) is not None:
            break
    await _settle(pilot)


async def answer_input(pilot: Pilot[None], app: ClawtowerApp) -> None:
    """The input gate's JSON editor, with an answer the schema refuses."""
    from textual.widgets import TextArea

    await pilot.press("2")
    await _settle(pilot)
    gate = next(a for a in app.model.approvals if a["kind"] == "workflow_input")
    app.request_answer(gate["id"])
    await _settle(pilot)
    app.screen.query_one(TextArea).text = '{"title": "v2", "audience": "everyone"}'
    await pilot.press("ctrl+s")
    await _settle(pilot)


async def unblock_choice(pilot: Pilot[None], app: ClawtowerApp) -> None:
    await detail("T-3")(pilot, app)
    await pilot.press("u")
    await _settle(pilot)


async def command_line(pilot: Pilot[None], app: ClawtowerApp) -> None:
    await pilot.press("colon", *"unblock t")
    await _settle(pilot)
    await pilot.pause(0.2)  # the completion arrives from a worker


async def help_panel(pilot: Pilot[None], app: ClawtowerApp) -> None:
    await pilot.press("question_mark")
    await _settle(pilot)


async def shoot(db: str, out: Path, name: str, step: Step, size: tuple[int, int],
                theme: str | None = None) -> Path:
    app = ClawtowerApp(db, run_engine=False, operator="alice")
    if theme:
        app.theme = theme
    async with app.run_test(size=size) as pilot:
        await app.wait_loaded()
        await step(pilot, app)  # type: ignore[arg-type]
        svg = app.export_screenshot(title=f"clawtower — {name}")
    # Keep leading spaces in text runs: rsvg (and some viewers) collapse them otherwise.
    svg = svg.replace("<svg ", '<svg xml:space="preserve" ', 1)
    path = out / f"{name}.svg"
    path.write_text(svg)
    return path


async def main(out: Path, size: tuple[int, int], only: list[str] | None = None) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        os.environ["CLAWTOWER_HOME"] = tmp  # no user themes in the pictures
        db = str(Path(tmp) / "clawtower.db")  # the store `clawtower demo` uses
        await seed_demo(db)
        small = (80, 24)
        shots: list[tuple[str, Step, str | None] | tuple[str, Step, str | None,
                                                         tuple[int, int]]] = [
            ("1-tasks", tasks, None),
            ("2-approvals", approvals, None),
            ("3-meetings", meetings, None),
            ("task-detail-circuit-open", detail("T-3"), None),
            ("task-detail-awaiting-approval", detail("T-4"), None),
            ("approve-confirm", confirm, None),
            ("command-palette", palette, None),
            ("key-panel", help_panel, None),
            ("1-tasks-light", tasks, "clawtower-light"),
            ("2-approvals-light", approvals, "clawtower-light"),
            ("3-meetings-light", meetings, "clawtower-light"),
            ("4-sessions", sessions("S-1"), None),
            ("4-sessions-steer", sessions("S-5"), None),
            ("4-sessions-history", session_history("S-5"), None),
            ("5-workflows", workflows, None),
            ("7-flows", flows("F-1/q3-brief/q3-figures"), None),
            ("5-workflows-light", workflows, "clawtower-light"),
            ("workflow-input-answer", answer_input, None),
            ("unblock-choice", unblock_choice, None),
            ("command-line-completion", command_line, None),
            ("1-tasks-80x24", tasks, None, small),
            ("2-approvals-acp-permission", acp_permission, None),
            ("4-sessions-acp", sessions("S-1"), None),
            ("6-experts", mode("6"), None, (120, 40)),
            ("8-triggers", mode("8"), None, (120, 40)),
            ("4-sessions-80x24", sessions("S-1"), None, small),
            ("7-flows-80x24", flows("F-1/q3-brief/q3-figures"), None, small),
            ("4-sessions-trace", trace(sessions("S-1")), None),
            ("7-flows-trace", trace(flows("F-1/q3-brief/q3-figures")), None),
        ]
        paths = []
        for name, step, theme, *rest in shots:
            if only and name not in only:
                continue
            # each picture from a fresh copy, so none sees another's clicks
            folder = Path(tmp) / name
            folder.mkdir()
            copy = str(folder / "clawtower.db")
            shutil.copyfile(db, copy)
            if name.startswith("3-meetings"):  # two finished meetings, one mid-round
                await seed_meetings(copy)
            if name.startswith("4-sessions") and "acp" not in name:  # fan-out, steered loop
                await seed_session_store(copy)
            if "acp" in name:  # a harness's turn waiting at its permission request
                await seed_acp_store(copy)
            if name.startswith("7-flows"):  # a finished and a failed flow
                await seed_flow_store(copy)
            if name.startswith(("5-workflows", "workflow-")):  # one done, two at gates
                await seed_workflows(copy)
            if name.startswith(("6-experts", "8-triggers")):  # an expert at its gate
                await seed_expert_store(copy)
            paths.append(await shoot(copy, out, name, step, rest[0] if rest else size, theme))
    return paths


def to_png(svgs: list[Path], width: int = 1600) -> list[Path]:
    tool = shutil.which("rsvg-convert")
    if tool is None:
        print("rsvg-convert not found (apt-get install librsvg2-bin fonts-firacode): SVG only")
        return []
    pngs = []
    for svg in svgs:
        png = svg.with_suffix(".png")
        subprocess.run([tool, "-w", str(width), "-o", str(png), str(svg)], check=True)
        pngs.append(png)
    return pngs


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", default=str(ROOT / "screenshots"))
    parser.add_argument("--size", default="140x40", help="terminal size, COLSxROWS")
    parser.add_argument("--only", nargs="*", metavar="NAME",
                        help="only these pictures (names without extension)")
    args = parser.parse_args()
    cols, rows = (int(x) for x in args.size.lower().split("x"))
    svgs = asyncio.run(main(Path(args.out), (cols, rows), args.only))
    pngs = to_png(svgs)
    for p in [*svgs, *pngs]:
        print(p.relative_to(ROOT) if p.is_relative_to(ROOT) else p)
