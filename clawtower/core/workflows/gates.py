"""What an approval or input gate asks: Lobster's request objects, built from a step.

A gate step's own JSON output may carry the request (`{prompt, items, ...}` or
`{requiresApproval: {...}}`); otherwise the step's `approval:` config and its result give the
prompt, items and preview. Prompts are NOT templated (Lobster returns `${who}` verbatim).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .jsvalues import UNDEFINED, js_prefix, js_string, serialize_for_stdout, to_json, truthy
from .load import Step

MAX_SUBJECT_BYTES = 192_000
DEFAULT_ENVELOPE_MAX_BYTES = 512_000


def normalize_approval_config(approval: Any) -> dict[str, Any]:
    if approval is True or approval == "required" or approval is None or approval is False:
        return {}
    if isinstance(approval, str):
        return {"prompt": approval}
    if not isinstance(approval, dict):
        return {}
    out: dict[str, Any] = {}
    if isinstance(approval.get("prompt"), str):
        out["prompt"] = approval["prompt"]
    if isinstance(approval.get("items"), list):
        out["items"] = approval["items"]
    if isinstance(approval.get("preview"), str):
        out["preview"] = approval["preview"]
    for camel, snake, typ in (("initiatedBy", "initiated_by", str),
                              ("requiredApprover", "required_approver", str),
                              ("requireDifferentApprover", "require_different_approver", bool)):
        if isinstance(approval.get(camel), typ):
            out[camel] = approval[camel]
        elif isinstance(approval.get(snake), typ):
            out[camel] = approval[snake]
    return out


def _trimmed(value: Any) -> str | None:
    if value is None or value is UNDEFINED:
        return None
    return js_string(value).strip() or None


def identity_from_raw(raw: Any) -> dict[str, Any]:
    if not isinstance(raw, dict):
        return {}
    out: dict[str, Any] = {}
    initiated = _trimmed(raw.get("initiatedBy", raw.get("initiated_by")))
    if initiated:
        out["initiatedBy"] = initiated
    required = _trimmed(raw.get("requiredApprover", raw.get("required_approver")))
    if required:
        out["requiredApprover"] = required
    diff = raw.get("requireDifferentApprover", raw.get("require_different_approver"))
    if diff is True:
        out["requireDifferentApprover"] = True
    return out


def _bool_like(value: str | None) -> bool | None:
    if value is None:
        return None
    v = value.strip().lower()
    if v in ("1", "true", "yes", "y"):
        return True
    if v in ("0", "false", "no", "n"):
        return False
    return None


def _with_identity(base: dict[str, Any], identity: Mapping[str, Any]) -> dict[str, Any]:
    if identity.get("initiatedBy"):
        base["initiatedBy"] = identity["initiatedBy"]
    if identity.get("requiredApprover"):
        base["requiredApprover"] = identity["requiredApprover"]
    if identity.get("requireDifferentApprover"):
        base["requireDifferentApprover"] = True
    return base


def result_preview(result: Mapping[str, Any]) -> str | None:
    stdout = result.get("stdout")
    if stdout:
        return js_prefix(str(stdout).strip(), 2000)
    if "json" in result:
        return js_prefix(serialize_for_stdout(result["json"]).strip(), 2000)
    return None


def approval_request(step: Step, result: Mapping[str, Any],
                     env: Mapping[str, str]) -> dict[str, Any]:
    """Lobster's extractApprovalRequest: the `requiresApproval` object minus the token."""
    config = normalize_approval_config(step.get("approval"))
    identity = identity_from_raw(config)
    if not identity.get("initiatedBy"):
        v = (env.get("LOBSTER_APPROVAL_INITIATED_BY") or "").strip()
        if v:
            identity["initiatedBy"] = v
    if not identity.get("requiredApprover"):
        v = (env.get("LOBSTER_APPROVAL_REQUIRED_APPROVER") or "").strip()
        if v:
            identity["requiredApprover"] = v
    if not identity.get("requireDifferentApprover") and _bool_like(
            env.get("LOBSTER_APPROVAL_REQUIRE_DIFFERENT_APPROVER")) is True:
        identity["requireDifferentApprover"] = True
    fallback = config.get("prompt", f"Approve {step['id']}?")
    data = result.get("json", UNDEFINED)
    if isinstance(data, dict):
        inner = data.get("requiresApproval")
        if isinstance(inner, dict) and truthy(inner.get("prompt")):
            merged = {**identity, **identity_from_raw(inner)}
            out: dict[str, Any] = {"type": "approval_request", "prompt": inner["prompt"],
                                   "items": inner.get("items") if inner.get("items")
                                   is not None else []}
            if truthy(inner.get("preview")):
                out["preview"] = inner["preview"]
            return _with_identity(out, merged)
        if truthy(data.get("prompt")):
            merged = {**identity, **identity_from_raw(data)}
            out = {"type": "approval_request", "prompt": data["prompt"],
                   "items": data.get("items") if data.get("items") is not None else []}
            if truthy(data.get("preview")):
                out["preview"] = data["preview"]
            return _with_identity(out, merged)
    if "items" in config:
        items = config["items"]
    elif data is UNDEFINED:
        items = []
    else:
        items = data if isinstance(data, list) else [data]
    preview = config["preview"] if "preview" in config else result_preview(result)
    out = {"type": "approval_request", "prompt": fallback, "items": items}
    if preview:
        out["preview"] = preview
    return _with_identity(out, identity)


def identity_of_request(request: Mapping[str, Any]) -> dict[str, Any]:
    return _with_identity({}, request)


def enforce_identity(step_id: str, identity: Mapping[str, Any],
                     approved_by: str | None) -> str | None:
    """Why this approver may not approve, in Lobster's words, or None."""
    approver = (approved_by or "").strip() or None
    required = identity.get("requiredApprover")
    different = identity.get("requireDifferentApprover")
    if not required and not different:
        return None
    if not approver:
        return (f"Workflow step {step_id} approval requires approver identity;"
                " set LOBSTER_APPROVAL_APPROVED_BY")
    if required and approver != required:
        return f"Workflow step {step_id} approval requires approver '{required}', got '{approver}'"
    initiated = identity.get("initiatedBy")
    if different and initiated and approver == initiated:
        return (f"Workflow step {step_id} approval must be granted by someone other than"
                f" '{initiated}'")
    return None


def _bytes(value: Any) -> int:
    return len(to_json(value).encode("utf-8"))


def input_request(step_id: str, prompt: Any, schema: Any, defaults: Any, subject: Any,
                  max_bytes: int = DEFAULT_ENVELOPE_MAX_BYTES) -> dict[str, Any]:
    """Lobster's buildNeedsInputRequest (a huge subject is truncated to fit the envelope)."""
    base: dict[str, Any] = {"type": "input_request", "prompt": prompt, "responseSchema": schema}
    if defaults is not UNDEFINED:
        base["defaults"] = defaults

    def fits(req: dict[str, Any]) -> bool:
        env = {"protocolVersion": 1, "ok": True, "status": "needs_input", "output": [],
               "requiresApproval": None, "requiresInput": {**req, "resumeToken": "x" * 220}}
        return _bytes(env) <= max_bytes

    req = {**base, "subject": subject}
    if fits(req):
        return req
    size = _bytes(subject)
    if size > MAX_SUBJECT_BYTES:
        req = {**base, "subject": {"truncated": True, "bytes": size,
                                   "preview": js_prefix(to_json(subject), 2000)}}
        if fits(req):
            return req
    req = {**base, "subject": {"truncated": True, "bytes": size,
                               "preview": "[subject omitted: envelope size limit]"}}
    if fits(req):
        return req
    raise ValueError(f"Workflow input step {step_id} needs_input envelope exceeds {max_bytes}"
                     " bytes even after subject truncation")
