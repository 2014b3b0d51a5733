"""The stored phase enum and its transition table (seed 000, with its failure branches).

The table is data: tests, the CLI's error messages and the console all read it from here.
Evidence guards (which review must exist, which approval must be decided) live in
`core.tasks.guards`, because they need the store.
"""

from __future__ import annotations

from enum import StrEnum


class Phase(StrEnum):
    SPEC_DRAFT = "spec_draft"
    SPEC_REVIEW = "spec_review"
    EXECUTION_READY = "execution_ready"
    EXECUTING = "executing"
    RETRYING = "retrying"
    SPEC_GATE = "spec_gate"
    QUALITY_GATE = "quality_gate"
    AWAITING_APPROVAL = "awaiting_approval"
    READY_TO_RESUME = "ready_to_resume"
    COMPLETED = "completed"
    FAILED = "failed"
    CIRCUIT_OPEN = "circuit_open"


P = Phase

TRANSITIONS: dict[Phase, frozenset[Phase]] = {
    # the minimal lifecycle, then each failure branch of the seed
    P.SPEC_DRAFT: frozenset({P.SPEC_REVIEW, P.FAILED}),
    P.SPEC_REVIEW: frozenset({P.EXECUTION_READY, P.SPEC_DRAFT, P.FAILED}),
    P.EXECUTION_READY: frozenset({P.EXECUTING, P.CIRCUIT_OPEN, P.FAILED}),
    P.EXECUTING: frozenset({P.SPEC_GATE, P.RETRYING, P.CIRCUIT_OPEN, P.FAILED}),
    P.RETRYING: frozenset({P.EXECUTING, P.CIRCUIT_OPEN, P.FAILED}),
    P.SPEC_GATE: frozenset({P.QUALITY_GATE, P.EXECUTION_READY, P.CIRCUIT_OPEN, P.FAILED}),
    P.QUALITY_GATE: frozenset(
        {P.COMPLETED, P.EXECUTION_READY, P.AWAITING_APPROVAL, P.CIRCUIT_OPEN, P.FAILED}
    ),
    P.AWAITING_APPROVAL: frozenset({P.READY_TO_RESUME, P.FAILED}),
    P.READY_TO_RESUME: frozenset({P.COMPLETED, P.FAILED}),
    # unblock options: a fresh attempt budget, a revised spec, or give up
    P.CIRCUIT_OPEN: frozenset({P.EXECUTION_READY, P.SPEC_DRAFT, P.FAILED}),
    P.COMPLETED: frozenset(),
    P.FAILED: frozenset(),
}

TERMINAL: frozenset[Phase] = frozenset({P.COMPLETED, P.FAILED})

# Retry policy (seed 000 §4): attempts 1-2 retry the same phase with bounded backoff,
# attempt 3 may escalate to a stronger model/runtime, attempt >= 4 opens the circuit.
MAX_ATTEMPTS = 3
ESCALATE_AT_ATTEMPT = 3
BACKOFF_BASE_S = 1.0
BACKOFF_CAP_S = 30.0

UNBLOCK_OPTIONS = [
    "execution_ready: retry with a fresh attempt budget",
    "spec_draft: revise the spec, then review it again",
    "failed: abandon the task",
]


# What `unblock CHOICE` accepts: the option's phase, or its plain word.
UNBLOCK_CHOICES: dict[str, Phase] = {
    "execution_ready": Phase.EXECUTION_READY, "retry": Phase.EXECUTION_READY,
    "spec_draft": Phase.SPEC_DRAFT, "revise": Phase.SPEC_DRAFT,
    "failed": Phase.FAILED, "abandon": Phase.FAILED,
}

# The unblock options as the console offers them: (choice word, phase, what it does).
UNBLOCK_MENU: list[tuple[str, Phase, str]] = [
    ("retry", Phase.EXECUTION_READY, UNBLOCK_OPTIONS[0].partition(": ")[2]),
    ("revise", Phase.SPEC_DRAFT, UNBLOCK_OPTIONS[1].partition(": ")[2]),
    ("abandon", Phase.FAILED, UNBLOCK_OPTIONS[2].partition(": ")[2]),
]


def parse_phase(value: str, field: str = "phase") -> Phase:
    from ..errors import ValidationError

    try:
        return Phase(value)
    except ValueError:
        known = ", ".join(p.value for p in Phase)
        raise ValidationError(f"{field}: unknown phase {value!r} (known: {known})") from None


def is_legal(src: Phase, dst: Phase) -> bool:
    return dst in TRANSITIONS[src]


def backoff_seconds(failed_attempt: int) -> float:
    """Bounded exponential backoff after `failed_attempt` failed (1 -> 1 s, 2 -> 2 s ...)."""
    return float(min(BACKOFF_CAP_S, BACKOFF_BASE_S * 2 ** max(0, failed_attempt - 1)))
