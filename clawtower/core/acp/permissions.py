"""Answering a harness's permission request, and the "always" rules.

A request is an approval of kind `acp_permission` in the one approvals list; its row in
`acp_permissions` holds the harness's options. An operator's answer (from the console,
`clawtower approve|reject [--always]` or `clawtower acp answer ID OPTION`) is one commit:
the approval's decision, the option that goes back to the harness, and for an "always"
answer a rule for this workspace, harness and tool kind that answers later requests the
same way without asking (listed by `clawtower acp rules`, revoked by `acp revoke`).

Our "always" does not depend on the harness offering an `allow_always` option: when it
offers only `allow_once` (Zed's example agent), that is what goes back, and the rule
remembers the rest.
"""

from __future__ import annotations

import json
from typing import Any

from ..errors import NotFound, ValidationError
from ..events import ApprovalDecided, NewEvent
from ..ids import new_id
from ..store.interface import WriteTx
from ..tasks import commands as c
from ..tasks.permissions import Role
from . import events as aev

ALLOW_KINDS = ("allow_once", "allow_always")
REJECT_KINDS = ("reject_once", "reject_always")


def pick_option(options: list[dict[str, str]], allow: bool, always: bool) -> dict[str, str]:
    """The harness's option for allow/reject, once/always: the exact kind when offered,
    else the other of the same side (an `always` the harness lacks is remembered by us)."""
    kinds = ALLOW_KINDS if allow else REJECT_KINDS
    prefer = (kinds[1], kinds[0]) if always else kinds
    for kind in prefer:
        for o in options:
            if o["kind"] == kind:
                return o
    names = ", ".join(f"{o['option_id']} ({o['kind']})" for o in options) or "none"
    raise ValidationError(f"the harness offers no {'allow' if allow else 'reject'} option"
                          f" (options: {names})")


def permission_row(tx: WriteTx, approval_id: str) -> dict[str, Any]:
    row = tx.one("SELECT * FROM acp_permissions WHERE approval_id=?", (approval_id,))
    if row is None:
        raise NotFound(f"approval {approval_id!r}: no such ACP permission request")
    return row


def decide(tx: WriteTx, approval_id: str, *, by: str, allow: bool | None = None,
           always: bool = False, option_id: str | None = None, reason: str = "",
           role: Role = Role.OPERATOR) -> dict[str, Any]:
    """An operator's answer: exactly once (the approval's own checks), in one commit with
    what goes back to the harness and, for "always", the rule."""
    perm = permission_row(tx, approval_id)
    options: list[dict[str, str]] = json.loads(perm["options"])
    if option_id is not None:
        chosen = next((o for o in options if o["option_id"] == option_id), None)
        if chosen is None:
            names = ", ".join(o["option_id"] for o in options)
            raise ValidationError(f"approval {approval_id!r}: option {option_id!r} is not one"
                                  f" the harness offered ({names})")
        allow = chosen["kind"] in ALLOW_KINDS
        always = always or chosen["kind"].endswith("_always")
    else:
        if allow is None:
            raise ValidationError(f"approval {approval_id!r}: allow or reject?")
        chosen = pick_option(options, allow, always)
    out = c.decide_approval(tx, approval_id, bool(allow), by, reason, role)
    if not out:
        return out  # refused (recorded by decide_approval)
    rule_id = ""
    if always:
        rule_id = new_id("rule")
        tx.emit(NewEvent(entity_id=rule_id, actor=by, role=role.value, payload=aev.AcpRuleSet(
            workspace=perm["workspace"], harness=perm["harness"], tool_kind=perm["tool_kind"],
            decision="allow" if allow else "reject", approval_id=approval_id)))
    tx.emit(NewEvent(entity_id=approval_id, actor=by, role=role.value,
                     payload=aev.AcpPermissionAnswered(
                         outcome="selected", option_id=chosen["option_id"],
                         option_kind=chosen["kind"], source="operator", rule_id=rule_id)))
    return {**out, "option_id": chosen["option_id"], "option_kind": chosen["kind"],
            "rule_id": rule_id}


def answer_cancelled(tx: WriteTx, approval_id: str, source: str, actor: str) -> bool:
    """Close a request nobody answered (timeout, the turn ended, the harness is gone) as
    `cancelled`; False when an answer came first (it stands)."""
    perm = permission_row(tx, approval_id)
    if perm["status"] != "pending":
        return False
    approval = tx.one("SELECT status FROM approvals WHERE id=?", (approval_id,))
    if approval is not None and approval["status"] == "pending":
        tx.emit(NewEvent(entity_id=approval_id, actor=actor, role="system",
                         payload=ApprovalDecided(decision="cancelled", reason=source)))
    tx.emit(NewEvent(entity_id=approval_id, actor=actor, role="system",
                     payload=aev.AcpPermissionAnswered(outcome="cancelled", source=source)))
    return True


def revoke_rule(tx: WriteTx, rule_id: str, by: str, reason: str = "") -> dict[str, Any]:
    row = tx.one("SELECT * FROM acp_rules WHERE id=?", (rule_id,))
    if row is None:
        raise NotFound(f"rule {rule_id!r}: no such rule (see `clawtower acp rules`)")
    if not row["active"]:
        raise ValidationError(f"rule {rule_id!r}: already revoked")
    tx.emit(NewEvent(entity_id=rule_id, actor=by, role="operator",
                     payload=aev.AcpRuleRevoked(reason=reason)))
    return {"rule": rule_id, "revoked_by": by}


__all__ = ["answer_cancelled", "decide", "pick_option", "revoke_rule"]
