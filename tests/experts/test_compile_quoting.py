"""A compiled expert step passes its prompt and its output schema to `llm_task.invoke` as
pipeline tokens: each must read back as exactly the text it was made from, whatever it holds
(a double-quoted word in a function's output description once broke the schema's JSON: the
quoting doubled backslashes that the pipeline reader keeps as they are in single quotes)."""

from __future__ import annotations

import json

from hypothesis import given
from hypothesis import strategies as st

from clawtower.core.experts.compile import _sq
from clawtower.core.workflows.pipeline import _split_pipes, _tokenize


def read_back(token: str) -> list[str]:
    """The tokens of the stage `token` lands in, as a compiled pipeline reads them."""
    stages = _split_pipes(f"exec --json --shell {_sq('true')} | llm_task.invoke --x {token}")
    return _tokenize(stages[1])


@given(st.text(alphabet=st.sampled_from("ab '\"\\|$`\n{}:"), max_size=40) | st.text(max_size=40))
def test_any_text_reads_back_exactly(text: str) -> None:
    assert read_back(_sq(text)) == ["llm_task.invoke", "--x", text]


def test_a_schema_with_quotes_and_backslashes_is_still_its_json() -> None:
    schema = {"type": "object", "properties": {"blocked": {
        "type": "string", "description": 'what is blocked, or "nothing" (a \\ path)'}}}
    text = json.dumps(schema)
    [_, _, back] = read_back(_sq(text))
    assert json.loads(back) == schema
