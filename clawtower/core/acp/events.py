"""ACP bridge events. A run (entity "acprun", id `acp-<hex>`) is one prompt turn of one
harness; its permission requests are approvals (kind `acp_permission`, entity "approval");
"always" answers are rules (entity "acprule"), kept per workspace and harness until revoked.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field

from ..events import Payload

PERMISSION_KIND = "acp_permission"  # the approvals' kind of a harness's permission request


class AcpRunStarted(Payload):
    """A harness was started for one prompt: `group` is its process group's tag
    (core.liveness: host:pid:start), `driver` the clawtower process that drives it."""

    TYPE = "acp.run_started"
    ENTITY = "acprun"
    harness: str
    workspace: str
    prompt: str
    subject: str = ""  # the session (or task) the run works for
    command: list[str] = Field(default_factory=list)
    group: str = ""
    driver: str = ""


class AcpRunGroup(Payload):
    """The harness process started: its process group's tag (killed whole on stop, and by
    recovery when the driver died)."""

    TYPE = "acp.run_group"
    ENTITY = "acprun"
    group: str


class AcpRunInitialized(Payload):
    """`initialize` and `session/new` answered: what the harness said about itself."""

    TYPE = "acp.run_initialized"
    ENTITY = "acprun"
    protocol_version: int
    agent_info: dict[str, Any] = Field(default_factory=dict)
    capabilities: dict[str, Any] = Field(default_factory=dict)
    acp_session_id: str = ""  # the harness's own id: a non-authoritative reference


class AcpText(Payload):
    """Message (or thought) chunks, coalesced: streamed text of the run, in order."""

    TYPE = "acp.text"
    ENTITY = "acprun"
    kind: str = "message"  # message | thought
    text: str


class AcpToolCall(Payload):
    """A tool call started or updated (`tool_call` / `tool_call_update`): the latest known
    title, kind, status, locations and content (text and diffs, clipped)."""

    TYPE = "acp.tool_call"
    ENTITY = "acprun"
    call_id: str
    title: str = ""
    kind: str = ""  # read | edit | delete | move | search | execute | think | fetch | other
    status: str = ""  # pending | in_progress | completed | failed
    locations: list[str] = Field(default_factory=list)
    content: list[dict[str, Any]] = Field(default_factory=list)


class AcpPlan(Payload):
    """The harness's plan (entries with priority and status): evidence of the run."""

    TYPE = "acp.plan"
    ENTITY = "acprun"
    entries: list[dict[str, Any]]


class AcpRunFinished(Payload):
    """status: done | failed | cancelled. stop_reason is the harness's (end_turn, cancelled,
    refusal, ...) or ours (error, timeout, interrupted)."""

    TYPE = "acp.run_finished"
    ENTITY = "acprun"
    status: str
    stop_reason: str
    text: str = ""
    error: str = ""


class AcpCancelRequested(Payload):
    """The operator asked for `session/cancel` (from any process; the driver sends it)."""

    TYPE = "acp.cancel_requested"
    ENTITY = "acprun"
    by: str = ""


class AcpPermissionRequested(Payload):
    """Details of an `acp_permission` approval (same entity id, same commit)."""

    TYPE = "acp.permission_requested"
    ENTITY = "approval"
    run_id: str
    harness: str
    workspace: str
    call_id: str
    tool_kind: str
    title: str
    locations: list[str] = Field(default_factory=list)
    command: str = ""
    options: list[dict[str, str]]  # {option_id, name, kind}


class AcpPermissionAnswered(Payload):
    """What went back to the harness. outcome: selected | cancelled; source: operator |
    rule | timeout | cancel (the turn ended) | gone (the harness was gone)."""

    TYPE = "acp.permission_answered"
    ENTITY = "approval"
    outcome: str
    option_id: str = ""
    option_kind: str = ""
    source: str = "operator"
    rule_id: str = ""


class AcpRuleSet(Payload):
    """An "always" answer: later requests of this harness, workspace and tool kind are
    answered `decision` (allow | reject) without asking, until revoked."""

    TYPE = "acp.rule_set"
    ENTITY = "acprule"
    workspace: str
    harness: str
    tool_kind: str
    decision: str
    approval_id: str = ""


class AcpRuleRevoked(Payload):
    TYPE = "acp.rule_revoked"
    ENTITY = "acprule"
    reason: str = ""


class AcpWriteIntended(Payload):
    """`fs/write_text_file`, before the write (the effect's intent): the file and the digest
    of what will be written. A crash before `acp.write_done` is settled on recovery by
    comparing digests: never written twice."""

    TYPE = "acp.write_intended"
    ENTITY = "acprun"
    idem_key: str
    path: str
    sha256: str
    size: int


class AcpWriteDone(Payload):
    TYPE = "acp.write_done"
    ENTITY = "acprun"
    idem_key: str
    outcome: str = "written"  # written | found_written (recovery) | abandoned (recovery)


__all__ = ["PERMISSION_KIND", "AcpCancelRequested", "AcpPermissionAnswered",
           "AcpPermissionRequested", "AcpPlan", "AcpRuleRevoked", "AcpRuleSet",
           "AcpRunFinished", "AcpRunGroup", "AcpRunInitialized", "AcpRunStarted", "AcpText",
           "AcpToolCall",
           "AcpWriteDone", "AcpWriteIntended"]
