"""The workflow loader: every refusal in Lobster's exact words, before anything runs."""

from __future__ import annotations

from pathlib import Path

import pytest

from clawtower.core.workflows.graph import render_graph
from clawtower.core.workflows.load import WorkflowError, load_workflow, resolve_workflow_file


def write(tmp_path: Path, text: str, name: str = "wf.lobster") -> Path:
    p = tmp_path / name
    p.write_text(text)
    return p


BAD = [
    ("steps: []", "Workflow file requires a non-empty steps array"),
    ("- 1", "Workflow file requires a non-empty steps array"),
    ("steps:\n  - run: echo", "Workflow step requires an id"),
    ("steps:\n  - id: a", "Workflow step a requires run, command, pipeline, workflow, parallel,"
     " for_each, approval, or input"),
    ("steps:\n  - id: a\n    run: echo\n    pipeline: exec x",
     "Workflow step a can only define one of run, command, pipeline, workflow, parallel, or"
     " for_each"),
    ("steps:\n  - id: a\n    run: echo\n  - id: a\n    run: echo", "Duplicate workflow step id: a"),
    ("steps:\n  - id: a\n    run: echo\n    timeout_ms: 0",
     "Workflow step a timeout_ms must be a positive integer between 1 and 2147483647"),
    ("steps:\n  - id: a\n    run: echo\n    timeout_ms: 2147483648",
     "Workflow step a timeout_ms must be a positive integer between 1 and 2147483647"),
    ("steps:\n  - id: a\n    run: echo\n    on_error: ignore",
     'Workflow step a on_error must be "stop", "continue", or "skip_rest"'),
    ("steps:\n  - id: a\n    run: echo\n    retry: {max: 0}",
     "Workflow step a retry.max must be a positive integer"),
    ("steps:\n  - id: a\n    run: echo\n    retry: {backoff: linear}",
     'Workflow step a retry.backoff must be "fixed" or "exponential"'),
    ("steps:\n  - id: a\n    run: echo\n    retry: {jitter: 1}",
     "Workflow step a retry.jitter must be a boolean"),
    ("steps:\n  - id: a\n    input: {prompt: p}",
     "Workflow step a input.responseSchema must be an object"),
    ("steps:\n  - id: a\n    input: {prompt: p, responseSchema: {type: 5}}",
     "Workflow step a input.responseSchema is invalid"),
    ("steps:\n  - id: a\n    approval: true\n    input: {prompt: p, responseSchema: {}}",
     "Workflow step a cannot define both approval and input"),
    ("steps:\n  - id: p\n    parallel:\n      branches:\n        - id: x\n          run: echo\n"
     "  - id: x\n    run: echo", "Duplicate workflow step id: x"),
    ("steps:\n  - id: x\n    run: echo\n  - id: p\n    parallel:\n      branches:\n"
     "        - id: x\n          run: echo",
     "Duplicate workflow id across steps/parallel branches: x"),
    ("steps:\n  - id: p\n    parallel:\n      branches:\n        - id: b\n          run: a\n"
     "        - id: b\n          run: b", "Workflow step p duplicate parallel branch id: b"),
    ("steps:\n  - id: p\n    parallel: {wait: some, branches: [{id: b, run: x}]}",
     'Workflow step p parallel wait must be "all" or "any"'),
    ("steps:\n  - id: l\n    for_each: $x.json\n    steps:\n      - id: s\n        approval: true",
     "Workflow step l for_each sub-steps cannot contain approval or input steps"),
    ("steps:\n  - id: l\n    for_each: $x.json\n    item_var: i\n    index_var: i\n    steps:\n"
     "      - id: s\n        run: echo",
     "Workflow step l item_var and index_var cannot be the same"),
    ("steps:\n  - id: a\n    approval: {required_approver: 5}",
     "Workflow step a approval.required_approver must be a string"),
    ("cost_limit: {max_usd: -1}\nsteps:\n  - id: a\n    run: echo",
     "Workflow cost_limit.max_usd must be a non-negative number"),
]


@pytest.mark.parametrize(("text", "message"), BAD)
def test_bad_files_are_refused_with_lobsters_message(tmp_path: Path, text: str,
                                                     message: str) -> None:
    with pytest.raises(WorkflowError) as err:
        load_workflow(write(tmp_path, text))
    assert err.value.message.startswith(message)
    assert err.value.kind == "runtime_error"


def test_invalid_yaml_and_json_are_runtime_errors(tmp_path: Path) -> None:
    with pytest.raises(WorkflowError):
        load_workflow(write(tmp_path, "steps: [\n"))
    with pytest.raises(WorkflowError):
        load_workflow(write(tmp_path, "{steps: ", "wf.json"))


def test_json_and_yaml_extensions_load(tmp_path: Path) -> None:
    j = write(tmp_path, '{"steps": [{"id": "a", "run": "echo"}]}', "wf.json")
    assert load_workflow(j)["steps"][0]["id"] == "a"
    y = write(tmp_path, "steps:\n  - id: a\n    command: echo\n", "wf.yml")
    assert load_workflow(y)["steps"][0]["command"] == "echo"


def test_file_argument_checks_are_parse_errors(tmp_path: Path) -> None:
    with pytest.raises(WorkflowError) as err:
        resolve_workflow_file(str(tmp_path / "missing.lobster"))
    assert err.value.kind == "parse_error"
    assert "ENOENT" in err.value.message
    txt = write(tmp_path, "steps: []", "wf.txt")
    with pytest.raises(WorkflowError) as err:
        resolve_workflow_file(str(txt))
    assert err.value.message.startswith("Workflow file must end in .lobster, .yaml, .yml, or"
                                        " .json: /")


def test_mermaid_graph(tmp_path: Path) -> None:
    wf = load_workflow(write(tmp_path, """
args: {who: {default: team}}
steps:
  - id: prep
    run: echo ${who}
  - id: gate
    approval: "ok?"
    stdin: $prep.json
  - id: 2go
    run: echo "a|b"
    when: $gate.approved
"""))
    out = render_graph(wf, "mermaid", {"who": "team"})
    assert out.splitlines() == [
        "flowchart TD",
        '  prep["prep\\nrun: echo team"]',
        '  gate{"gate\\napproval gate"}',
        '  s_2go["2go\\nrun: echo &quot;a&#124;b&quot;"]',
        "",
        "  prep -->|next| gate",
        "  prep -->|stdin| gate",
        "  gate -->|next| s_2go",
        "  gate -->|when: $gate.approved| s_2go",
    ]
    assert render_graph(wf, "dot").startswith("digraph workflow {")
    assert "Edges:" in render_graph(wf, "ascii")


def test_ascii_graph_keeps_one_line_per_node_and_edge(tmp_path: Path) -> None:
    """Issue 27 item 9: a command or condition holding line breaks is flattened (`\\n`)."""
    wf = load_workflow(write(tmp_path, "steps:\n  - id: a\n    run: |\n      echo one\n"
                                       "      echo two\n  - id: b\n    run: cat\n"
                                       "    when: |\n      $a.stdout ==\n      'x'\n"))
    assert render_graph(wf, "ascii").splitlines() == [
        "Workflow Graph", "", "Nodes:",
        "- a [run] (run: echo one\\necho two\\n)",
        "- b [run] (run: cat)", "", "Edges:",
        "- a -> b (next)",
        "- a -> b (when: $a.stdout ==\\n'x')",
    ]


def test_yaml_is_read_as_yaml_1_2_like_lobster(tmp_path: Path) -> None:
    wf = load_workflow(write(tmp_path, "args:\n  a: {default: on}\n  b: {default: yes}\n"
                                       "  c: {default: 1e3}\n  d: {default: 2024-01-01}\n"
                                       "  e: {default: 0x1F}\nsteps:\n  - id: s\n    run: echo\n"))
    assert [wf["args"][k]["default"] for k in "abcde"] == ["on", "yes", 1000.0, "2024-01-01", 31]


@pytest.mark.parametrize(("text", "message"), [
    ("", "Unexpected end of JSON input"),
    ("[1,]", "Unexpected token ']', \"[1,]\" is not valid JSON"),
    ('{"a":1,}', "Expected double-quoted property name in JSON at position 7"),
    ("{a:1}", "Expected property name or '}' in JSON at position 1"),
    ("1 2", "Unexpected non-whitespace character after JSON at position 2"),
    ("01", "Unexpected number in JSON at position 1"),
    ("NaN", '"NaN" is not valid JSON'),
    ('{"steps": [{"id": "a", "run": "echo a"},]}\n',
     "Unexpected token ']', ...\"\"echo a\"},]}\n\" is not valid JSON"),
])
def test_json_errors_are_worded_like_v8(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(WorkflowError) as err:
        load_workflow(write(tmp_path, text, "wf.json"))
    assert err.value.message == message


@pytest.mark.parametrize(("schema", "message"), [
    ("{type: nope}", "schema is invalid: data/type must be equal to one of the allowed values,"
                     " data/type must be array, data/type must match a schema in anyOf"),
    ("{type: object, required: x}", "schema is invalid: data/required must be array"),
    ("{minLength: -1}", "schema is invalid: data/minLength must be >= 0"),
    ("[]", "schema is invalid: data must be object,boolean"),
])
def test_bad_response_schema_is_worded_like_ajv(tmp_path: Path, schema: str,
                                                message: str) -> None:
    text = f"steps:\n  - id: ask\n    input: {{prompt: p, responseSchema: {schema}}}\n"
    with pytest.raises(WorkflowError) as err:
        load_workflow(write(tmp_path, text))
    assert err.value.message == f"Workflow step ask input.responseSchema is invalid: {message}"


def test_shared_parse_is_read_only_and_follows_the_file(tmp_path: Path) -> None:
    """A run's start and a resume share the cached parse (no copy, issue 36): it cannot be
    changed, and a file changed on disk (even to text of the same length) is parsed again."""
    import copy
    import hashlib

    from clawtower.core.workflows.load import load_workflow_shared

    p = write(tmp_path, "steps:\n  - id: a\n    run: echo old\n")
    shared, digest = load_workflow_shared(p)
    assert digest == hashlib.sha256(p.read_bytes()).hexdigest()
    again, _ = load_workflow_shared(p)
    assert again is shared  # the same parse, not a copy
    with pytest.raises(TypeError):
        shared["steps"][0]["run"] = "echo changed"
    with pytest.raises(TypeError):
        shared["steps"].append({"id": "b"})
    with pytest.raises(TypeError):
        shared.pop("steps")
    assert isinstance(shared, dict) and isinstance(shared["steps"], list)
    mine = load_workflow(p)  # a copy of one's own, plain and changeable
    mine["steps"][0]["run"] = "echo mine"
    assert type(mine) is dict and type(mine["steps"]) is list
    plain = copy.deepcopy(shared)
    plain["steps"].append({"id": "b"})
    assert load_workflow_shared(p)[0]["steps"][0]["run"] == "echo old"

    write(tmp_path, "steps:\n  - id: a\n    run: echo new\n")  # same length
    changed, digest2 = load_workflow_shared(p)
    assert changed["steps"][0]["run"] == "echo new" and digest2 != digest


def test_a_file_that_is_not_utf8_is_refused_every_time(tmp_path: Path) -> None:
    from clawtower.core.workflows.load import load_workflow_shared

    p = tmp_path / "bad.lobster"
    p.write_bytes(b"steps:\n  - id: a\n    run: echo \xff\n")
    for _ in range(2):
        with pytest.raises(WorkflowError, match="not UTF-8 text"):
            load_workflow_shared(p)


def test_conditions_of_a_shared_parse_are_checked_until_they_pass(tmp_path: Path) -> None:
    """The condition check of a shared parse is remembered only once it passed, per start."""
    from clawtower.core.workflows.conditions import check_workflow_conditions
    from clawtower.core.workflows.load import load_workflow_shared

    bad = write(tmp_path, "steps:\n  - id: a\n    run: echo\n  - id: b\n    run: echo\n"
                "    when: $nope.approved\n", "bad.lobster")
    shared, _ = load_workflow_shared(bad)
    for _ in range(2):  # a failure is not remembered
        with pytest.raises(WorkflowError, match="nope"):
            check_workflow_conditions(shared, 0)
    good = write(tmp_path, "steps:\n  - id: a\n    run: echo\n  - id: b\n    run: echo\n"
                 "    when: $a.approved\n", "good.lobster")
    shared, _ = load_workflow_shared(good)
    for start in (0, 0, 1):
        check_workflow_conditions(shared, start)


def test_values_a_run_takes_from_a_shared_parse_are_its_own(tmp_path: Path) -> None:
    """Argument defaults and literal stdin values reach steps as plain values of their own:
    a stage that changes its input never meets the read-only shared parse."""
    from clawtower.core.workflows.load import load_workflow_shared
    from clawtower.core.workflows.refs import resolve_input_value
    from clawtower.core.workflows.runner import resolve_args

    p = write(tmp_path, "args:\n  xs:\n    default: [1, {a: 2}]\nsteps:\n  - id: a\n"
              "    pipeline: exec cat\n    stdin: {k: [1]}\n")
    shared, _ = load_workflow_shared(p)
    args = resolve_args(shared.get("args"), None)
    assert type(args["xs"]) is list and type(args["xs"][1]) is dict
    args["xs"].append(3)
    data = resolve_input_value(shared["steps"][0]["stdin"], args, {})
    assert type(data) is dict and type(data["k"]) is list
    data["k"].append(2)
    assert load_workflow_shared(p)[0]["steps"][0]["stdin"] == {"k": [1]}
