"""A flow node's own session and job, as the sessions see them (core/flows/turns.py makes
them): the job's id derives from the flow task's, so the job's finish can tell a node's
turn (its session ends with it) from any other job of that session."""

from __future__ import annotations

import hashlib
import json
from typing import Any


def flow_node_job_id(task_id: str) -> str:
    """The TurnJob of an executed flow node (core/flows/turns.py): derived from its flow
    task's id, so an engine re-running the node after a crash finds the same job."""
    return "J-flow-" + hashlib.sha256(task_id.encode()).hexdigest()[:16]


def flow_node_of(session: dict[str, Any], job_id: str) -> str | None:
    """The flow task whose node `session` runs, when `job_id` is that node's own job (a
    session a flow created for one node: `created_by flow:F-n`, its task naming the flow
    task); None for any other session or job (e.g. a fork of a node's session)."""
    if not str(session["created_by"]).startswith("flow:"):
        return None
    tid = json.loads(session["task"] or "{}").get("flow_task")
    return tid if isinstance(tid, str) and job_id == flow_node_job_id(tid) else None


__all__ = ["flow_node_job_id", "flow_node_of"]
