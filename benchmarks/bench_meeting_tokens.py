"""Meeting prompt tokens: rolling summary vs a full-history baseline, in the same run.

A 10-round, 5-agent simulated meeting that never reaches consensus (every round two agents
AGREE, two DISAGREE, one is NEUTRAL) is run twice on one store:

  rolling  what the coordinator does: each agent is given the question and the rolling
           summary (capped at `--summary-tokens`, default 500)
  full     the baseline (MeetingConfig.history="full"): each agent's prompt carries the
           whole transcript of every earlier reply, verbatim

The simulated participants are the built-in simulator (replies of ~20-30 tokens, counted
with the tokenizer the usage figures use). The summarizer is a stand-in for an LLM asked to
compress into at most N tokens: it answers with the newest material first and fills up to
the cap with the older summary, then with restated positions, so its size tracks the cap
from round 1 (a real summarizer told "at most 500 tokens" writes close to that; a summary
that only grew slowly to the cap would flatter round 2 and make the ratio look worse).

Reported per round: prompt tokens per agent (mean over the 5 agents, from the recorded
meeting.reply_recorded usage), and the round-10 / round-2 ratio for each mode.
Targets: rolling <= 1.2x, full-history >= 4x. Deterministic: no timing involved.

    .venv/bin/python benchmarks/bench_meeting_tokens.py [--rounds 10] [--agents 5]
                                                        [--summary-tokens 500] [--json PATH]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from clawtower.core.agents.provider import ChatRequest, StreamEvent, Usage  # noqa: E402
from clawtower.core.agents.registry import AgentSet  # noqa: E402
from clawtower.core.agents.simulator import (  # noqa: E402
    AgentDef,
    SimScript,
    Simulator,
    Step,
    count_tokens,
    truncate_tokens,
)
from clawtower.core.meetings.coordinator import Coordinator, MeetingConfig  # noqa: E402
from clawtower.core.store import open_store  # noqa: E402

STANCES = ["AGREE", "DISAGREE", "NEUTRAL", "AGREE", "DISAGREE"]


class CapFillingSummarizer:
    """Compresses into (almost exactly) the requested number of tokens."""

    name = "bench-summarizer"

    async def stream(self, request: ChatRequest) -> AsyncIterator[StreamEvent]:
        cap = request.max_tokens or 500
        user = request.messages[-1].content
        previous = user.partition("PREVIOUS SUMMARY:\n")[2].partition("\nTHIS ROUND:\n")[0]
        this_round = user.partition("\nTHIS ROUND:\n")[2].partition("\n\nFULL REPLIES:")[0]
        tally = " ".join(line[2:].strip() for line in this_round.splitlines()
                         if line.startswith("- "))
        text = tally
        if previous.strip() and previous.strip() != "(none)":
            text += " Earlier: " + previous.strip()
        filler = (" Positions restated: the group remains split; the open points are the"
                  " rollback path, the latency budget and who owns the migration.")
        while count_tokens(text) < cap:
            text += filler
        text = truncate_tokens(text, cap)
        yield StreamEvent(kind="text", text=text)
        prompt = sum(count_tokens(m.content) for m in request.messages)
        yield StreamEvent(kind="usage", usage=Usage(prompt_tokens=prompt,
                                                    completion_tokens=count_tokens(text)))
        yield StreamEvent(kind="done", finish_reason="stop")


def cast(n: int) -> tuple[AgentSet, list[str]]:
    names = [f"p{i + 1}" for i in range(n)]
    defs = {name: AgentDef(role="participant") for name in names}
    defs["scribe"] = AgentDef(role="summarizer", provider="bench-summarizer")
    script = SimScript(seed=11, speed=0.0, delay_ms=(0, 0), agents=defs, scripts={
        name: {"meeting": [Step(stance=STANCES[i % len(STANCES)])]}
        for i, name in enumerate(names)})
    sim = Simulator(script)
    return AgentSet(agents=dict(defs), providers={"simulator": sim,
                                                  "bench-summarizer": CapFillingSummarizer()}), \
        names


async def run(rounds: int, n_agents: int, cap: int) -> dict[str, Any]:
    agents, names = cast(n_agents)
    out: dict[str, Any] = {"rounds": rounds, "agents": n_agents, "summary_tokens": cap}
    with tempfile.TemporaryDirectory() as tmp:
        store = await open_store(Path(tmp) / "bench.db")
        try:
            for mode in ("rolling", "full"):
                config = MeetingConfig(topic="Should we move the export service to the new"
                                       " queue before the release?", participants=names,
                                       max_rounds=rounds, summary_tokens=cap,
                                       history=mode)
                result = await Coordinator(store, agents).run(config, meeting_id=f"bench-{mode}")
                assert result.rounds == rounds and result.reason == "max_rounds", result
                rows = await store.fetchall(
                    "SELECT round, avg(prompt_tokens) AS p FROM meeting_replies"
                    " WHERE meeting_id=? GROUP BY round ORDER BY round", (f"bench-{mode}",))
                per_round = [round(r["p"], 1) for r in rows]
                out[mode] = {"prompt_per_agent": per_round,
                             "ratio_last_to_2": round(per_round[-1] / per_round[1], 2)}
        finally:
            await store.close()
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=10)
    p.add_argument("--agents", type=int, default=5)
    p.add_argument("--summary-tokens", type=int, default=500)
    p.add_argument("--json", metavar="PATH")
    args = p.parse_args()
    res = asyncio.run(run(args.rounds, args.agents, args.summary_tokens))
    print(f"{args.rounds}-round, {args.agents}-agent meeting, no consensus;"
          f" summary cap {args.summary_tokens} tokens")
    print("prompt tokens per agent per round (mean of the agents):")
    print("| round | rolling summary | full history |")
    print("|---|---|---|")
    for i, (a, b) in enumerate(zip(res["rolling"]["prompt_per_agent"],
                                   res["full"]["prompt_per_agent"], strict=True), 1):
        print(f"| {i} | {a:g} | {b:g} |")
    r, f = res["rolling"]["ratio_last_to_2"], res["full"]["ratio_last_to_2"]
    print(f"round {args.rounds} / round 2: rolling {r:g}x (target <= 1.2x),"
          f" full history {f:g}x (target >= 4x)")
    if args.json:
        Path(args.json).write_text(json.dumps(res, indent=2) + "\n")
    return 0 if r <= 1.2 and f >= 4 else 1


if __name__ == "__main__":
    raise SystemExit(main())
