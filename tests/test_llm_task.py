"""llm-task (core/agents/llm_task.py): fences, validation, one repair, OpenClaw's error wording,
schema-less calls, the simulator's answers, usage events; and the real SmolLM2 server."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import jsonschema
import pytest

from clawtower.core.agents.llm_task import (
    SYSTEM_PROMPT,
    LlmTaskInvalidJson,
    LlmTaskSchemaMismatch,
    run_llm_task,
    strip_fences,
)
from clawtower.core.agents.openai import OpenAIProvider
from clawtower.core.agents.provider import ChatRequest, ProviderError, StreamEvent, Usage
from clawtower.core.agents.simreplies import minimal_instance
from clawtower.core.agents.simulator import Simulator, script_from_data
from clawtower.core.agents.usage import Price, UsageRecorder, usage_for_subject
from clawtower.core.errors import ValidationError

PERSON = {"type": "object", "required": ["name", "age"], "additionalProperties": False,
          "properties": {"name": {"type": "string", "minLength": 1},
                         "age": {"type": "integer", "minimum": 0}}}


class Scripted:
    """Answers each call with the next text; records the requests."""

    name = "scripted"

    def __init__(self, *texts: str) -> None:
        self.texts = list(texts)
        self.requests: list[ChatRequest] = []

    async def stream(self, request: ChatRequest) -> AsyncIterator[StreamEvent]:
        self.requests.append(request)
        yield StreamEvent(kind="text", text=self.texts[min(len(self.requests),
                                                           len(self.texts)) - 1])
        yield StreamEvent(kind="usage", usage=Usage(prompt_tokens=10, completion_tokens=5))
        yield StreamEvent(kind="done", finish_reason="stop")


def sim(steps: list[dict[str, Any]], label: str = "x") -> Simulator:
    return Simulator(script_from_data({"speed": 0, "scripts": {label: {"llm_task": steps}}},
                                      "test"))


@pytest.mark.parametrize("text", [
    '{"name": "Ada", "age": 36}',
    '```json\n{"name": "Ada", "age": 36}\n```',
    '```\n{"name": "Ada", "age": 36}\n```\n',
    '  ```JSON\r\n{"name": "Ada", "age": 36}\r\n```  ',
])
async def test_fences_are_stripped(text: str) -> None:
    p = Scripted(text)
    result = await run_llm_task(p, model="m", prompt="Who?", input={"id": 1}, schema=PERSON)
    assert result.data == {"name": "Ada", "age": 36}
    assert result.text == text and not result.repaired and result.calls == 1
    assert result.details() == {"json": result.data, "provider": "scripted", "model": "m"}


async def test_request_is_openclaws_json_only_call() -> None:
    p = Scripted('{"name": "Ada", "age": 36}')
    await run_llm_task(p, model="m", prompt="Extract the person.", input={"text": "Ada, 36"},
                       schema=PERSON, max_tokens=50, temperature=0.1, timeout_s=5)
    req = p.requests[0]
    assert req.messages[0].role == "system" and req.messages[0].content == SYSTEM_PROMPT
    assert req.messages[1].content == (
        'TASK:\nExtract the person.\n\nINPUT_JSON:\n{\n  "text": "Ada, 36"\n}\n')
    assert req.response_schema == PERSON and req.tools == []
    assert (req.max_tokens, req.temperature, req.timeout_s) == (50, 0.1, 5)
    assert req.metadata["purpose"] == "llm_task"


async def test_repair_success_shows_the_model_its_errors() -> None:
    p = Scripted('{"name": "Ada", "age": "old"}', '{"name": "Ada", "age": 36}')
    result = await run_llm_task(p, model="m", prompt="p", schema=PERSON)
    assert result.repaired and result.calls == 2 and result.data["age"] == 36
    assert result.usage == Usage(prompt_tokens=20, completion_tokens=10)
    repair = p.requests[1].messages
    assert repair[-2].role == "assistant" and repair[-2].content == '{"name": "Ada", "age": "old"}'
    assert "LLM JSON did not match schema: /age: 'old' is not of type 'integer'" \
        in repair[-1].content
    assert '"minimum": 0' in repair[-1].content  # the schema is shown again


async def test_repair_of_invalid_json() -> None:
    p = Scripted("Sure! Here you go: {name: Ada}", '{"name": "Ada", "age": 1}')
    result = await run_llm_task(p, model="m", prompt="p", schema=PERSON)
    assert result.repaired and result.data == {"name": "Ada", "age": 1}
    assert "LLM returned invalid JSON (" in p.requests[1].messages[-1].content


async def test_repair_failure_invalid_json_error_text() -> None:
    p = Scripted("not json", "still not json")
    with pytest.raises(LlmTaskInvalidJson) as info:
        await run_llm_task(p, model="m", prompt="p", schema=PERSON)
    assert str(info.value) == "LLM returned invalid JSON"
    assert info.value.text == "still not json" and len(p.requests) == 2


async def test_repair_failure_schema_error_text() -> None:
    p = Scripted('{"name": ""}', '{"name": "", "age": -1, "extra": true}')
    with pytest.raises(LlmTaskSchemaMismatch) as info:
        await run_llm_task(p, model="m", prompt="p", schema=PERSON)
    assert str(info.value) == (
        "LLM JSON did not match schema: /: Additional properties are not allowed ('extra' was"
        " unexpected); /age: -1 is less than the minimum of 0; /name: '' should be non-empty")
    assert len(info.value.errors) == 3


async def test_no_repair_when_disabled() -> None:
    p = Scripted("nope", '{"name": "A", "age": 1}')
    with pytest.raises(LlmTaskInvalidJson):
        await run_llm_task(p, model="m", prompt="p", schema=PERSON, repair=False)
    assert len(p.requests) == 1


async def test_schema_less_call_returns_any_json() -> None:
    p = Scripted("```json\n[1, 2, 3]\n```")
    result = await run_llm_task(p, model="m", prompt="List three numbers.")
    assert result.data == [1, 2, 3] and p.requests[0].response_schema is None
    assert p.requests[0].messages[1].content.endswith("INPUT_JSON:\nnull\n")


async def test_bad_schema_and_prompt_are_validation_errors() -> None:
    with pytest.raises(ValidationError, match=r"schema: invalid JSON Schema at /type"):
        await run_llm_task(Scripted("{}"), model="m", prompt="p", schema={"type": "banana"})
    with pytest.raises(ValidationError, match="prompt is required"):
        await run_llm_task(Scripted("{}"), model="m", prompt="  ")


async def test_timeout_is_a_provider_error() -> None:
    class Hangs:
        name = "hangs"

        async def stream(self, request: ChatRequest) -> AsyncIterator[StreamEvent]:
            await asyncio.Event().wait()
            yield StreamEvent(kind="done")

    with pytest.raises(ProviderError, match=r"provider hangs: m: llm-task timed out after 0.1 s"):
        await run_llm_task(Hangs(), model="m", prompt="p", timeout_s=0.1)


async def test_usage_recorded_per_call_with_cost(store: Any) -> None:
    p = Scripted("bad", '{"name": "Ada", "age": 3}')
    rec = UsageRecorder(store, "wf-run-1", "extractor", Price(1_000_000, 2_000_000))
    result = await run_llm_task(p, model="m", prompt="p", schema=PERSON, recorder=rec)
    total = await usage_for_subject(store, "wf-run-1")
    assert total.calls == 2 and total.tokens == 30
    assert total.cost_usd == pytest.approx(2 * (10 * 1 + 5 * 2)) == result.cost_usd
    events = await store.events_after(0, entity_id="wf-run-1")
    assert {e.payload.purpose for e in events} == {"llm_task"}  # type: ignore[attr-defined]


# -- the simulator ---------------------------------------------------------------------------

async def test_simulator_invalid_first_valid_after_repair() -> None:
    s = sim([{"text": "```json\n{\"name\": 7}\n```"}, {"answer": {"name": "Ada", "age": 2}}])
    result = await run_llm_task(s, model="sim", prompt="p", schema=PERSON,
                                metadata={"labels": ["x"]})
    assert result.repaired and result.data == {"name": "Ada", "age": 2}


async def test_simulator_scripted_by_agent_name_and_failing_twice() -> None:
    s = sim([{"text": "oops"}], label="extractor")
    with pytest.raises(LlmTaskInvalidJson, match=r"^LLM returned invalid JSON$"):
        await run_llm_task(s, model="sim", prompt="p", metadata={"agent": "extractor"})


async def test_simulator_unscripted_answers_a_schema_instance_or_echoes() -> None:
    s = Simulator(script_from_data({"speed": 0}, "test"))
    result = await run_llm_task(s, model="sim", prompt="p", schema=PERSON)
    assert result.data == {"name": "x", "age": 0} and not result.repaired
    again = await run_llm_task(s, model="sim", prompt="p", schema=PERSON)
    assert again.text == result.text  # deterministic
    echo = await run_llm_task(s, model="sim", prompt="p", input={"k": [1, 2]})
    assert echo.data == {"ok": True, "input": {"k": [1, 2]}}


async def test_simulator_free_form_ask_is_scriptable_and_says_it_is_simulated() -> None:
    from clawtower.core.agents.completion import complete
    from clawtower.core.agents.provider import ChatMessage

    def ask(agent: str) -> ChatRequest:
        return ChatRequest(model="sim-standard", metadata={"purpose": "ask", "agent": agent},
                           messages=[ChatMessage(role="user", content="Capital of France?")])

    s = Simulator(script_from_data({"speed": 0, "scripts": {
        "ada": {"ask": [{"text": "Paris."}]}}}, "test"))
    assert (await complete(s, ask("ada"))).text == "Paris."
    unscripted = (await complete(s, ask("ben"))).text
    assert unscripted.startswith('(simulated reply from ben, sim-standard) You asked:'
                                 ' "Capital of France?"') and "STANCE" not in unscripted


@pytest.mark.parametrize("schema", [
    PERSON,
    {"type": "array", "items": {"type": "string", "minLength": 3}, "minItems": 2},
    {"type": "object", "required": ["kind", "tags", "meta"], "properties": {
        "kind": {"enum": ["a", "b"]}, "tags": {"type": "array"},
        "meta": {"$ref": "#/$defs/meta"}},
     "$defs": {"meta": {"type": "object", "required": ["n"],
                        "properties": {"n": {"type": "number", "exclusiveMinimum": 4}}}}},
    {"anyOf": [{"type": "null"}, {"type": "string"}]},
    {"allOf": [{"type": "object", "required": ["a"], "properties": {"a": {"const": 1}}},
               {"required": ["b"], "properties": {"b": {"type": "boolean"}}}]},
    {"type": ["integer", "null"], "maximum": -3},
])
def test_minimal_instance_is_valid(schema: dict[str, Any]) -> None:
    jsonschema.validate(minimal_instance(schema), schema)


# -- the real SmolLM2 server -----------------------------------------------------------------

async def test_real_llm_task_with_a_small_schema(llama: str) -> None:
    """llama-cpp grammar-constrains json_object + schema, so even a 135M model's reply is
    valid JSON that matches."""
    provider = OpenAIProvider("smollm2", llama, timeout_s=60, retries=1)
    schema = {"type": "object", "required": ["city", "country"],
              "properties": {"city": {"type": "string"}, "country": {"type": "string"}}}
    result = await run_llm_task(provider, model="smollm2", prompt="Name a city and its country.",
                                input={"continent": "Europe"}, schema=schema, max_tokens=64,
                                temperature=0.0, timeout_s=60)
    jsonschema.validate(result.data, schema)
    assert json.loads(strip_fences(result.text)) == result.data
    assert result.usage.prompt_tokens > 0 and result.provider == "smollm2"
