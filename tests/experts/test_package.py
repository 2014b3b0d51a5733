"""Our acme package loads clean, with tiers and prompt as the spec says; the unmodified
openexperts radiant fixture (found at test time, see radiant.py) loads with exactly the
findings a careful reader makes."""

from __future__ import annotations

from pathlib import Path

from clawtower.core.experts.package import load_package, steps_of
from clawtower.core.experts.prompt import assemble, render, resolved_tiers
from clawtower.core.experts.tiers import approval_tier

from .conftest import ACME


def test_acme_loads_without_findings() -> None:
    pkg = load_package(ACME)
    assert [str(p) for p in pkg.problems] == []
    assert list(pkg.functions) == ["classify-ticket", "assess-urgency", "draft-reply"]
    assert list(pkg.processes) == ["ticket-triage", "overdue-sweep"]
    assert list(pkg.tools) == ["helpdesk", "kb"]
    assert [s.text[:28] for s in steps_of(pkg.processes["ticket-triage"].body)][:2] == [
        "Open the scratchpad at `scra", "Read the ticket with `helpde"]
    assert pkg.required_tools() == ["helpdesk", "kb"]


def test_acme_tiers_resolve_overrides_then_tool_then_default() -> None:
    pkg = load_package(ACME)
    assert approval_tier(pkg, "helpdesk", "send_reply") == "manual"
    assert approval_tier(pkg, "helpdesk", "set_priority") == "confirm"
    assert approval_tier(pkg, "helpdesk", "get_customer") == "auto"  # an override
    assert approval_tier(pkg, "kb", "get_article") == "confirm"  # the policy default
    tiers = resolved_tiers(pkg)
    assert tiers["manual"] == ["helpdesk.send_reply"]
    assert sorted(tiers["confirm"]) == ["helpdesk.set_priority", "kb.get_article"]


def test_acme_prompt_has_persona_in_full_and_indexes_only() -> None:
    text = render(assemble(load_package(ACME), "/ws"))
    assert "## Identity\n# Identity\n\nYou are a calm, precise support engineer" in text
    assert "- Changing a ticket's priority needs an operator's confirmation." in text
    assert "- classify-ticket: Sort a support ticket into a category and a severity" in text
    assert "How to decide" not in text  # function bodies are read on demand
    assert "- severity-matrix: Which tickets are sev1, sev2 and sev3" in text  # frontmatter
    assert "- tone-guide: Tone Guide" in text  # no frontmatter: the heading
    assert "- state/shift-notes.md (session)" in text
    assert "MANUAL (draft only, never execute):\n- helpdesk.send_reply" in text
    assert "A confirm request waits 12h; then: escalate." in text
    assert "/ws/functions/{name}.md" in text


def test_radiant_loads_with_only_the_two_expected_warnings(radiant: Path) -> None:
    pkg = load_package(radiant)
    assert pkg.errors == []
    assert sorted(str(p) for p in pkg.warnings) == sorted([
        "README.md:file: warning: missing: spec section 2 lists it as required, but section"
        " 14's load-time checks do not, so the package still loads",
        "processes/scan-for-opportunities.md:steps[3]: warning: uses function"
        " 'determine-next-action', which the process's functions list does not name",
    ])
    assert list(pkg.functions) == ["classify-email-intent", "determine-next-action",
                                   "compose-response"]
    assert list(pkg.processes) == ["inbound-email-triage", "scan-for-opportunities"]
    assert [s.text[:30] for s in steps_of(pkg.processes["inbound-email-triage"].body)][:2] == [
        "Open or read scratchpad at `sc", "Fetch the inbound email using "]


def test_radiant_approval_tiers_resolve_overrides_then_default(radiant: Path) -> None:
    pkg = load_package(radiant)
    assert approval_tier(pkg, "email", "send") == "manual"
    assert approval_tier(pkg, "crm", "get_contact") == "auto"
    assert approval_tier(pkg, "calendar", "check_availability") == "confirm"  # the default
    tiers = resolved_tiers(pkg)
    assert tiers["manual"] == ["email.send", "calendar.schedule_meeting"]
    assert "crm.update_deal_stage" in tiers["confirm"]
    assert "calendar.check_availability" in tiers["confirm"]


def test_radiant_prompt_has_persona_in_full_and_indexes_only(radiant: Path) -> None:
    pkg = load_package(radiant)
    text = render(assemble(pkg, "/ws"))
    assert "## Identity\n# Identity\n\nYou are a B2B sales expert" in text
    assert "- Log every triage decision as a CRM note for auditability." in text
    assert "- classify-email-intent: Determine the intent and urgency" in text
    assert "Decision Rules" not in text  # function bodies are read on demand
    assert "- meddpicc: MEDDPICC Sales Methodology" in text
    assert "- state/session-notes.md (session)" in text
    assert "MANUAL (draft only, never execute):\n- email.send" in text
    assert "A confirm request waits 24h; then: escalate." in text
    assert "escalate to the main agent" in text
    assert "/ws/functions/{name}.md" in text
