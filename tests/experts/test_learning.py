"""Learnings are events; the files in the workspace are their projection: confirm waits for
the approvals list, auto persists, manual only drafts, max_entries_per_file prunes to an
archive, and compiled function prompts carry the approved learnings."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

from clawtower.core.approvals import Approvals
from clawtower.core.errors import ValidationError
from clawtower.core.experts.compile import compile_process
from clawtower.core.experts.learning import project, propose
from clawtower.core.experts.package import load_package

from .conftest import ACME


def variant(tmp_path: Path, approval: str, limit: int = 50) -> Any:
    root = tmp_path / f"pkg-{approval}"
    shutil.copytree(ACME, root)
    m = root / "expert.yaml"
    m.write_text(m.read_text().replace("  approval: confirm\n  max_entries_per_file: 25",
                                       f"  approval: {approval}\n  max_entries_per_file:"
                                       f" {limit}"))
    pkg = load_package(root)
    assert not pkg.errors
    return pkg


async def test_confirm_learning_persists_only_once_approved(tmp_path: Path,
                                                            store: Any) -> None:
    pkg = load_package(ACME)
    ws = tmp_path / "ws"
    a = await propose(store, pkg, ws, scope="classify-ticket",
                      title="SSO lockouts are sev1", observation="A team locked out after an"
                      " SSO change was classified sev2", correction="Classify as"
                      " account_access, sev1", source="process/ticket-triage, step 5",
                      confidence="high")
    b = await propose(store, pkg, ws, scope="classify-ticket", title="Bad idea",
                      observation="x", correction="y")
    assert a["tier"] == "confirm" and a["approval_id"]
    f = ws / "learnings" / "classify-ticket.md"
    assert not f.exists()
    approvals = Approvals(store)
    await approvals.approve(a["approval_id"], by="ada")
    await approvals.reject(b["approval_id"], by="ada")
    assert await project(store, pkg, ws) == {"classify-ticket": 1}
    text = f.read_text()
    assert text.startswith("---\nscope: classify-ticket\nentry_count: 1\n---")
    assert "### SSO lockouts are sev1" in text and "- **Confidence**: high" in text
    assert "Bad idea" not in text
    wf = compile_process(pkg, "ticket-triage", expert=pkg.name, workspace=ws,
                         bindings_file=tmp_path / "b.yaml", bindings={})
    classify = next(s for s in wf["steps"] if s["id"] == "classify_ticket")
    assert "## Learnings (apply them)" in classify["pipeline"]
    assert "Classify as account_access, sev1" in classify["pipeline"]
    draft = next(s for s in wf["steps"] if s["id"] == "draft_reply")
    assert "Learnings" not in draft["pipeline"]


async def test_auto_persists_and_prunes_to_the_limit(tmp_path: Path, store: Any) -> None:
    pkg = variant(tmp_path, "auto", limit=2)
    ws = tmp_path / "ws"
    for i in range(3):
        out = await propose(store, pkg, ws, scope="package", title=f"L{i}", observation="o",
                            correction="c")
        assert out["approval_id"] is None
    text = (ws / "learnings" / "_package.md").read_text()
    assert "entry_count: 2" in text and "### L1" in text and "### L2" in text
    assert "### L0" not in text
    assert "### L0" in (ws / "learnings" / "archive" / "_package.md").read_text()


async def test_manual_is_only_a_draft(tmp_path: Path, store: Any) -> None:
    pkg = variant(tmp_path, "manual")
    ws = tmp_path / "ws"
    await propose(store, pkg, ws, scope="package", title="Draft me", observation="o",
                  correction="c")
    assert not (ws / "learnings" / "_package.md").exists()
    assert "### Draft me" in (ws / "learnings" / "_drafts.md").read_text()


async def test_bad_proposals_are_refused(tmp_path: Path, store: Any) -> None:
    pkg = load_package(ACME)
    with pytest.raises(ValidationError, match="must be 'package' or a function name"):
        await propose(store, pkg, tmp_path, scope="nope", title="t", observation="o",
                      correction="c")
    root = tmp_path / "off"
    shutil.copytree(ACME, root)
    m = root / "expert.yaml"
    m.write_text(m.read_text().replace("learning:\n  enabled: true", "learning:\n"
                                       "  enabled: false"))
    with pytest.raises(ValidationError, match=r"learning\.enabled"):
        await propose(store, load_package(root), tmp_path, scope="package", title="t",
                      observation="o", correction="c")
