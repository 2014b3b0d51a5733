"""The governed turn's rule, checked on the source: no module outside the turn loop and the
named exceptions calls a model (a provider's `stream` or `chat`, or `complete`), so no agent
action bypasses the spec's tools, approval tiers, budgets and steering. The import-linter
contract (pyproject.toml) forbids importing `core.agents.completion` elsewhere; this test
also catches a direct `provider.stream(...)`, which no import reveals."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent / "clawtower"  # the import root

# file -> why it may call a model directly
ALLOWED = {
    "core/agents/turns.py": "the turn loop itself",
    "core/agents/completion.py": "defines complete()",
    "core/agents/llm_task.py": "a JSON answer to a schema, no tools",
    "core/meetings/coordinator.py": "a meeting reply is an opinion, no tools",
    "core/orchestrator.py": "task reviewers' and executor's JSON verdicts, no tools",
    "core/flows/brains.py": "a flow's decompose/synthesise decision",
    "cli/agents.py": "`llm ask`: an operator's own question to a model",
}
PROVIDER_METHODS = {"stream", "chat"}


def model_calls(path: Path) -> list[str]:
    """`complete(...)` calls and `<something provider-like>.stream/chat(...)` calls."""
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    # `complete` the model call (imported from core.agents.completion), not a namesake
    # such as the flows service's complete(task)
    model_complete = any(isinstance(n, ast.ImportFrom) and (n.module or "").endswith(
        "completion") and any(a.name == "complete" for a in n.names) for n in ast.walk(tree))
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        f = node.func
        if isinstance(f, ast.Name) and f.id == "complete" and model_complete:
            found.append(f"complete() at line {node.lineno}")
        elif isinstance(f, ast.Attribute) and f.attr in PROVIDER_METHODS:
            target = ast.unparse(f.value).lower()
            if "provider" in target or "sim" in target:
                found.append(f"{ast.unparse(f)}() at line {node.lineno}")
    return found


def test_only_the_turn_and_the_named_exceptions_call_a_model() -> None:
    offenders = {}
    for top in ("core", "cli", "tui"):
        paths = sorted((ROOT / top).rglob("*.py"))
        assert paths, ROOT / top
        for path in paths:
            rel = path.relative_to(ROOT).as_posix()
            if rel in ALLOWED:
                continue
            calls = model_calls(path)
            if calls:
                offenders[rel] = calls
    assert offenders == {}, f"model calls outside the governed turn: {offenders}"


def test_the_checker_sees_a_direct_call(tmp_path: Path) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text("from core.agents.completion import complete\n\n"
                   "async def f(provider, r):\n    async for e in provider.stream(r):\n"
                   "        pass\n    return await complete(provider, r)\n")
    assert model_calls(bad) == ["provider.stream() at line 4", "complete() at line 6"]


def test_every_exception_still_exists() -> None:
    for rel in ALLOWED:
        assert (ROOT / rel).is_file(), rel
