"""A run's spend and its cost_limit beyond what the differential corpus covers (the cost_*
cases there hold clawtower to the real Lobster): clawtower's own LLM stages billed at the
agent's price and never twice, spend surviving a pause and another process, what `workflow
show` reports, JavaScript's toFixed."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from clawtower.core.workflows.cost import CostTracker, billable_tokens, describe_cost, js_fixed
from clawtower.core.workflows.llm import config_llm
from clawtower.core.workflows.pipeline import LlmAnswer
from clawtower.core.workflows.service import Workflows

ENV = {"PATH": os.environ.get("PATH", "/bin")}


@pytest.mark.parametrize(("value", "digits", "text"), [
    (0.125, 2, "0.13"),      # exactly representable half: away from zero (Python says 0.12)
    (2.5, 0, "3"),
    (1.005, 2, "1.00"),      # really 1.00499999999999989...
    (0.0225, 4, "0.0225"),
    (0.0, 2, "0.00"),
    (123.456789, 4, "123.4568"),
])
def test_js_fixed_matches_number_to_fixed(value: float, digits: int, text: str) -> None:
    assert js_fixed(value, digits) == text


def test_billable_tokens_reads_every_spelling_and_ignores_the_rest() -> None:
    assert billable_tokens({"inputTokens": 3, "outputTokens": 4}) == (3, 4)
    assert billable_tokens({"input_tokens": "7", "output_tokens": 8.9}) == (7, 8)
    assert billable_tokens({"prompt_tokens": -2, "completion_tokens": "x"}) == (0, 0)
    assert billable_tokens({"totalTokens": 99, "cache_read": 5}) == (0, 0)


def write(tmp_path: Path, text: str, name: str = "flow.lobster") -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def priced_llm(cost: float, model: str = "house-llm") -> Any:
    async def call(prompt: str, items: list[Any], schema: dict[str, Any] | None,
                   model_arg: str) -> LlmAnswer:
        return LlmAnswer(data=None, text="an answer", model=model,
                         usage={"promptTokens": 10, "completionTokens": 5}, cost_usd=cost)
    return call


async def test_llm_stages_are_billed_at_the_agents_price_and_only_once(store, tmp_path) -> None:
    flow = write(tmp_path, """
name: llm-spend
cost_limit: {max_usd: 0.03, action: stop}
steps:
  - id: one
    pipeline: llm.invoke --prompt "first"
  - id: two
    pipeline: llm.invoke --prompt "second"
  - id: never
    run: echo never
""")
    errs: list[str] = []
    wf = Workflows(store, env=ENV, cwd=str(tmp_path), llm=priced_llm(0.02), stderr=errs.append)
    env = await wf.run(flow)
    assert env["error"]["message"] == "Cost limit exceeded: $0.0400 > $0.03 limit"
    # the stage's item carries model + usage but is never priced again from Lobster's table
    # (no "No LLM pricing configured" warning for the house model)
    assert errs == []
    [row] = await wf.list()
    run = await wf.get(row["id"])
    # the run failed: the step it never reached will never run (not "pending")
    assert [s["status"] for s in run["steps"]] == ["done", "done", "cancelled"]
    assert [(line["step_id"], line["source"], line["cost_usd"])
            for line in run["cost"]["lines"]] == [("one", "agent", 0.02), ("two", "agent", 0.02)]


async def test_a_shell_step_reprinting_an_llm_item_is_billed_like_lobster(store, tmp_path) -> None:
    # Lobster bills any output item with model + usage, so a step cannot launder spend; an
    # item re-printed by a shell step is a new item
    flow = write(tmp_path, """
name: relay
cost_limit: {max_usd: 1, action: warn}
steps:
  - id: ask
    pipeline: llm.invoke --prompt "hi"
  - id: relay
    run: echo '{"model":"gpt-4o","usage":{"prompt_tokens":1000,"completion_tokens":0}}'
""")
    wf = Workflows(store, env=ENV, cwd=str(tmp_path), llm=priced_llm(0.5, "gpt-4o"),
                   stderr=lambda s: None)
    assert (await wf.run(flow))["ok"]
    [row] = await wf.list()
    cost = (await wf.get(row["id"]))["cost"]
    assert [(x["step_id"], x["source"]) for x in cost["lines"]] == [("ask", "agent"),
                                                                      ("relay", "priced")]
    assert cost["cost_usd"] == 0.5025


async def test_spend_survives_a_pause_and_another_process(store, tmp_path) -> None:
    config = tmp_path / "clawtower.yaml"
    config.write_text("agents:\n  writer:\n    provider: simulator\n"
                      "    price: {prompt: 1000000, completion: 1000000}\n")
    flow = write(tmp_path, """
name: paused-spend
cost_limit: {max_usd: 0, action: warn}
steps:
  - id: draft
    pipeline: llm.invoke --prompt "draft the release notes"
  - id: gate
    approval: Publish?
  - id: polish
    pipeline: llm.invoke --prompt "polish the release notes"
""")
    first = Workflows(store, env=ENV, cwd=str(tmp_path), stderr=lambda s: None,
                      llm=config_llm("writer", str(config), store=store))
    paused = await first.run(flow)
    assert paused["status"] == "needs_approval"
    run_id = (await first.list())[0]["id"]
    before = (await first.get(run_id))["cost"]
    assert [x["source"] for x in before["lines"]] == ["agent"]
    assert before["cost_usd"] > 0  # $1 a token: the tokens of the call

    errs: list[str] = []  # a new service, as another process would build it
    second = Workflows(store, env=ENV, cwd=str(tmp_path), stderr=errs.append,
                       llm=config_llm("writer", str(config), store=store))
    done = await second.resume(approval_id=paused["requiresApproval"]["approvalId"],
                               approve=True)
    assert done["status"] == "ok"
    after = (await second.get(run_id))["cost"]
    assert len(after["lines"]) == 2 and after["cost_usd"] > before["cost_usd"]
    # the warning after the resumed step counts the paused run's spend too
    assert errs[-1] == (f"[WARN] Cost ${js_fixed(after['cost_usd'], 4)} exceeds limit"
                        " $0.00\n")
    shown = describe_cost(after)
    assert shown is not None and shown.startswith(f"${after['cost_usd']:.4f} over the $0.00"
                                                  " limit (warn)")


async def test_spend_billed_before_a_failure_is_kept_and_stops_the_run(store, tmp_path) -> None:
    flow = write(tmp_path, """
name: fail-after-spend
cost_limit: {max_usd: 0.01, action: stop}
steps:
  - id: list
    run: echo '[1, 2, 3]'
  - id: loop
    for_each: $list.json
    on_error: continue
    steps:
      - id: spend
        run: echo '{"model":"gpt-4o","usage":{"prompt_tokens":0,"completion_tokens":600}}'
  - id: never
    run: echo never
""")
    wf = Workflows(store, env=ENV, cwd=str(tmp_path), stderr=lambda s: None)
    env = await wf.run(flow)
    assert env["error"]["message"] == "Cost limit exceeded: $0.0120 > $0.01 limit"
    run = await wf.get((await wf.list())[0]["id"])
    loop = next(s for s in run["steps"] if s["id"] == "loop")
    assert loop["status"] == "failed" and loop["error"].startswith("Cost limit exceeded")
    assert [x["step_id"] for x in run["cost"]["lines"]] == ["loop.spend", "loop.spend"]


async def test_no_limit_no_lines_says_nothing(store, tmp_path) -> None:
    wf = Workflows(store, env=ENV, cwd=str(tmp_path), stderr=lambda s: None)
    assert (await wf.run(write(tmp_path, "steps:\n  - id: a\n    run: echo hi\n")))["ok"]
    run = await wf.get((await wf.list())[0]["id"])
    assert run["cost"]["lines"] == [] and describe_cost(run["cost"]) is None


def test_a_child_tracker_passes_agent_spend_up_but_not_priced_lines() -> None:
    errs: list[str] = []
    parent = CostTracker(ENV, errs.append, (0.01, "stop"))
    child = CostTracker(ENV, errs.append, None, parent)
    item = {"model": "gpt-4o", "usage": {"prompt_tokens": 1000, "completion_tokens": 0}}
    child.charge_agent("c", "m", {"promptTokens": 1, "completionTokens": 1}, 0.005, item)
    child.track("c2", {"json": {"model": "gpt-4o", "usage": {"prompt_tokens": 1000}}})
    assert [x.source for x in parent.lines] == ["agent"]
    assert [x.source for x in child.lines] == ["agent", "priced"]
    parent.track("out", {"json": item})  # the child's LLM item reaching the parent: paid
    assert [x.source for x in parent.lines] == ["agent"]
    assert json.dumps(parent.summary()["cost_usd"]) == "0.005"
