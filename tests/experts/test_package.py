"""The unmodified radiant fixture loads with exactly the findings a careful reader makes."""

from __future__ import annotations

from pathlib import Path

from core.experts.package import approval_tier, load_package, steps_of
from core.experts.prompt import assemble, render, resolved_tiers

from .conftest import FIXTURE


def test_fixture_loads_with_only_the_two_expected_warnings() -> None:
    pkg = load_package(FIXTURE)
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


def test_approval_tiers_resolve_overrides_then_default() -> None:
    pkg = load_package(FIXTURE)
    assert approval_tier(pkg, "email", "send") == "manual"
    assert approval_tier(pkg, "crm", "get_contact") == "auto"
    assert approval_tier(pkg, "calendar", "check_availability") == "confirm"  # the default
    tiers = resolved_tiers(pkg)
    assert tiers["manual"] == ["email.send", "calendar.schedule_meeting"]
    assert "crm.update_deal_stage" in tiers["confirm"]
    assert "calendar.check_availability" in tiers["confirm"]


def test_prompt_has_persona_in_full_and_indexes_only(tmp_path: Path) -> None:
    pkg = load_package(FIXTURE)
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
