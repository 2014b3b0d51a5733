"""The orchestrator's scan: the tasks with something to do that needs no human, one query
run on every wake-up (`Orchestrator.actionable`)."""

from __future__ import annotations

from .phases import Phase

#: phases with something left to do (everything but completed, failed, circuit_open)
ACTIVE = frozenset(p.value for p in Phase
                   if p not in (Phase.COMPLETED, Phase.FAILED, Phase.CIRCUIT_OPEN))
ACTIVE_SQL = ",".join(f"'{p.value}'" for p in Phase if p.value in ACTIVE)

# The scan `actionable()` runs: a waiting task's latest approval is probed in the
# approvals_by_subject index alone (it covers kind and status: schema v19).
ACTIONABLE_SQL = (
    "SELECT t.id, t.phase, t.spec_ok, t.spec_version, t.retry_not_before FROM tasks t"
    f" WHERE t.phase IN ({ACTIVE_SQL})"
    " AND (t.phase != 'awaiting_approval' OR (SELECT a.kind='task_side_effect'"
    "      AND a.status!='pending' FROM approvals a WHERE a.subject=t.id"
    "      ORDER BY a.seq DESC LIMIT 1))"
    " AND (t.phase != 'spec_draft' OR (t.spec_ok AND NOT EXISTS (SELECT 1 FROM reviews r"
    "      WHERE r.task_id=t.id AND r.stage='spec_review' AND r.verdict!='approved'"
    "      AND r.spec_version=t.spec_version)))"
    " ORDER BY t.num")

# The same scan over the tasks the log touched after a seq (?1): their own events, their
# approvals' and their leases'. What a wake-up by a change reads (`Orchestrator.run`):
# O(changes), where the whole scan probes every task awaiting an approval (issue 36: ~0.2
# ms of an approval's round trip with 250 waiting, and growing with them).
CHANGED_SQL = ACTIONABLE_SQL.replace(" ORDER BY t.num", (
    " AND t.id IN (SELECT CASE WHEN e.entity='task' THEN e.entity_id"
    "      WHEN e.entity='lease' AND e.entity_id LIKE 'task:%' THEN substr(e.entity_id, 6)"
    "      WHEN e.entity='approval' THEN (SELECT a.subject FROM approvals a"
    "      WHERE a.id=e.entity_id) END"
    # `+e.entity`: the range of seq (the rowid), not every event of the entity
    "      FROM events e WHERE e.seq > ?1 AND +e.entity IN ('task', 'approval', 'lease'))"
    " ORDER BY t.num"))
