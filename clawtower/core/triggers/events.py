"""Trigger events (entity "trigger", entity id the invocation id `I-<hex>`;
stores written before have `T-<hex>` ids).

The queue is the projection of these events (core/triggers/projections.py): an invocation is
received (or skipped as a duplicate), claimed by one worker under a lease, linked to the
workflow run it started, and ends done, retrying, dead-lettered, escalated or abandoned.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field

from ..events import Payload


class TriggerReceived(Payload):
    """An event a trigger accepted: stored and queued in `lane` (the concurrency lane:
    the invocation id for parallel, the trigger for serial, trigger+key for serial_per_key).
    Appended with the idem_key `dedupe:`/`cron:`/`channel:`... so a second copy from any
    process is refused by the store."""

    TYPE = "trigger.received"
    ENTITY = "trigger"
    expert: str
    trigger: str
    process: str
    source: str  # webhook | cron | channel | manual | retry
    lane: str
    mode: str  # parallel | serial | serial_per_key
    payload: dict[str, Any]
    inputs: dict[str, Any]
    dedupe: str | None = None
    dedupe_until: float | None = None
    fire_at: float | None = None  # cron: the scheduled time this fire stands for
    missed: int = 0  # cron: earlier scheduled times that were not fired (downtime)
    source_seq: int | None = None  # channel: the session.inbound event it came from
    warning: str = ""


class TriggerSkipped(Payload):
    """A duplicate: the same dedupe key was accepted within the window; never run."""

    TYPE = "trigger.skipped"
    ENTITY = "trigger"
    expert: str
    trigger: str
    source: str
    dedupe: str
    duplicate_of: str
    payload: dict[str, Any] = Field(default_factory=dict)


class TriggerClaimed(Payload):
    """One worker took the invocation (its lease `trigger:<id>` was taken in the same
    commit); `attempt` counts from 1. `recovered` when the previous claimer died."""

    TYPE = "trigger.claimed"
    ENTITY = "trigger"
    owner: str
    attempt: int
    recovered: bool = False


class TriggerLinked(Payload):
    """The workflow run this attempt started (recorded in the run's own start commit)."""

    TYPE = "trigger.linked"
    ENTITY = "trigger"
    run_id: str
    attempt: int


class TriggerPaused(Payload):
    """The run waits for a human (an approval gate): the lane stays held until it ends."""

    TYPE = "trigger.paused"
    ENTITY = "trigger"
    run_id: str
    attempt: int


class TriggerFinished(Payload):
    """The attempt succeeded; `delivery` is what was delivered (format, channel, text)."""

    TYPE = "trigger.finished"
    ENTITY = "trigger"
    attempt: int
    run_id: str | None = None
    output: Any = None
    delivery: dict[str, Any] = Field(default_factory=dict)
    elapsed_s: float = 0.0


class TriggerFailed(Payload):
    """The attempt failed. `retry_at` set: it runs again then (the lane stays held);
    else `action` is the package's on_failure: escalate | abandon | dead_letter."""

    TYPE = "trigger.failed"
    ENTITY = "trigger"
    attempt: int
    error: str
    run_id: str | None = None
    retry_at: float | None = None
    action: str = ""
    execution_log: dict[str, Any] = Field(default_factory=dict)


class TriggerSlaBreached(Payload):
    """The process took longer than its delivery `sla`: `action` warn | escalate."""

    TYPE = "trigger.sla_breached"
    ENTITY = "trigger"
    sla: str
    elapsed_s: float
    action: str


class DeadLetterRetried(Payload):
    """The operator sent a dead-lettered invocation back to its queue (attempts reset)."""

    TYPE = "trigger.deadletter_retried"
    ENTITY = "trigger"
    by: str


class DeadLetterDropped(Payload):
    TYPE = "trigger.deadletter_dropped"
    ENTITY = "trigger"
    by: str
    reason: str = ""


class EscalationResolved(Payload):
    """The operator acknowledged an escalated invocation (it leaves the console's list)."""

    TYPE = "trigger.escalation_resolved"
    ENTITY = "trigger"
    by: str


class ChannelScanned(Payload):
    """How far the channel-trigger scan of session messages got (entity id `channels`)."""

    TYPE = "trigger.channel_scanned"
    ENTITY = "trigger"
    seq: int


class HookAuthFailed(Payload):
    """A webhook request refused before authentication succeeded (entity id
    `hook:<expert>/<trigger>`): `reason` is the detail the caller was NOT told (its reply
    held only `error_id`); `address` is the peer address of the connection."""

    TYPE = "trigger.auth_failed"
    ENTITY = "trigger"
    expert: str
    trigger: str
    address: str
    reason: str
    error_id: str
    # issue 35: a counted refusal is a row of `auth_failures` (the limiter's shared window,
    # core/triggers/ratelimit.py), whose rows older than `window_s` it drops; an operator's
    # mistake (hooks.yaml unusable) is recorded but not counted against the caller
    counted: bool = True
    window_s: float = 0.0


class HookAuthThrottled(Payload):
    """`address` passed `failures` refused credentials on this trigger within `window_s`:
    its requests are answered 429 until the oldest of them ages out (`retry_after` s).
    One event per episode, not per 429, so an attacker cannot flood the log."""

    TYPE = "trigger.auth_throttled"
    ENTITY = "trigger"
    expert: str
    trigger: str
    address: str
    failures: int
    window_s: float
    retry_after: float
    error_id: str
