"""Versioned schema. The log table is permanent; projection tables are derived and rebuildable.

`PRAGMA application_id` marks a file as a clawtower store and `PRAGMA user_version` holds
the schema version, so a foreign or newer file is refused before anything is written.
"""

from __future__ import annotations

APPLICATION_ID = 0x436C5457  # "ClTW"

LOG_SCHEMA = """
CREATE TABLE events (
    seq       INTEGER PRIMARY KEY AUTOINCREMENT,
    ts        REAL    NOT NULL,
    entity    TEXT    NOT NULL,
    entity_id TEXT    NOT NULL,
    type      TEXT    NOT NULL,
    actor     TEXT    NOT NULL,
    role      TEXT    NOT NULL,
    payload   TEXT    NOT NULL,
    idem_key  TEXT    UNIQUE
);
CREATE INDEX events_by_entity ON events(entity, entity_id, seq);
CREATE TRIGGER events_no_update BEFORE UPDATE ON events
BEGIN SELECT RAISE(ABORT, 'the event log is append-only'); END;
CREATE TRIGGER events_no_delete BEFORE DELETE ON events
BEGIN SELECT RAISE(ABORT, 'the event log is append-only'); END;
"""

# Projection tables: everything here can be dropped and rebuilt from `events`.
PROJECTION_SCHEMA_V1 = """
CREATE TABLE tasks (
    id            TEXT PRIMARY KEY,
    num           INTEGER NOT NULL UNIQUE,
    title         TEXT NOT NULL,
    phase         TEXT NOT NULL,
    spec          TEXT NOT NULL,
    spec_ok       INTEGER NOT NULL,
    spec_problems TEXT NOT NULL,
    spec_version  INTEGER NOT NULL,
    source        TEXT,
    attempts      INTEGER NOT NULL DEFAULT 0,
    retry_not_before REAL,
    retry_escalate INTEGER NOT NULL DEFAULT 0,
    circuit       TEXT,
    phase_reason  TEXT NOT NULL DEFAULT '',
    created_at    REAL NOT NULL,
    updated_at    REAL NOT NULL,
    last_seq      INTEGER NOT NULL
);
CREATE INDEX tasks_by_phase ON tasks(phase, num);
CREATE TABLE phase_history (
    seq INTEGER PRIMARY KEY, task_id TEXT NOT NULL, from_phase TEXT NOT NULL,
    to_phase TEXT NOT NULL, actor TEXT NOT NULL, role TEXT NOT NULL, reason TEXT NOT NULL,
    attempt INTEGER NOT NULL, at REAL NOT NULL
);
CREATE INDEX phase_history_by_task ON phase_history(task_id, seq);
CREATE TABLE reviews (
    seq INTEGER PRIMARY KEY, task_id TEXT NOT NULL, kind TEXT NOT NULL, stage TEXT NOT NULL,
    reviewer TEXT NOT NULL, verdict TEXT NOT NULL, findings TEXT NOT NULL,
    details TEXT NOT NULL, attempt INTEGER NOT NULL, spec_version INTEGER NOT NULL,
    at REAL NOT NULL
);
CREATE INDEX reviews_by_task ON reviews(task_id, seq);
CREATE TABLE attempts (
    task_id TEXT NOT NULL, n INTEGER NOT NULL, model TEXT NOT NULL, runtime TEXT NOT NULL,
    escalated INTEGER NOT NULL, status TEXT NOT NULL, reason TEXT NOT NULL,
    started_at REAL NOT NULL, finished_at REAL, heartbeat_at REAL, heartbeats INTEGER NOT NULL,
    checkpoint TEXT, output TEXT,
    PRIMARY KEY (task_id, n)
);
CREATE TABLE retries (
    seq INTEGER PRIMARY KEY, task_id TEXT NOT NULL, attempt INTEGER NOT NULL,
    next_attempt INTEGER NOT NULL, reason TEXT NOT NULL, not_before REAL NOT NULL,
    escalate INTEGER NOT NULL, at REAL NOT NULL
);
CREATE INDEX retries_by_task ON retries(task_id, seq);
CREATE TABLE artifacts (
    seq INTEGER PRIMARY KEY, task_id TEXT NOT NULL, attempt INTEGER NOT NULL, name TEXT NOT NULL,
    uri TEXT NOT NULL, digest TEXT NOT NULL, summary TEXT NOT NULL, at REAL NOT NULL
);
CREATE INDEX artifacts_by_task ON artifacts(task_id, seq);
CREATE TABLE side_effects (
    effect_id TEXT PRIMARY KEY, task_id TEXT NOT NULL, attempt INTEGER NOT NULL,
    kind TEXT NOT NULL, description TEXT NOT NULL, target TEXT NOT NULL,
    idem_key TEXT NOT NULL UNIQUE, status TEXT NOT NULL, result TEXT NOT NULL,
    planned_at REAL NOT NULL, done_at REAL
);
CREATE INDEX side_effects_by_task ON side_effects(task_id, status);
CREATE TABLE approvals (
    id TEXT PRIMARY KEY, kind TEXT NOT NULL, subject TEXT NOT NULL, title TEXT NOT NULL,
    prompt TEXT NOT NULL, context TEXT NOT NULL, preview TEXT NOT NULL,
    requested_by TEXT NOT NULL, requested_role TEXT NOT NULL, requested_at REAL NOT NULL,
    required_approver TEXT, require_different INTEGER NOT NULL,
    status TEXT NOT NULL, decided_by TEXT, decided_at REAL, reason TEXT NOT NULL,
    seq INTEGER NOT NULL
);
CREATE INDEX approvals_by_status ON approvals(status, seq);
CREATE INDEX approvals_by_subject ON approvals(subject, seq);
CREATE TABLE refusals (
    seq INTEGER PRIMARY KEY, actor TEXT NOT NULL, role TEXT NOT NULL, action TEXT NOT NULL,
    target TEXT NOT NULL, reason TEXT NOT NULL, at REAL NOT NULL
);
CREATE TABLE leases (
    name TEXT PRIMARY KEY, owner TEXT NOT NULL, expires_at REAL NOT NULL, since REAL NOT NULL,
    released INTEGER NOT NULL
);
CREATE TABLE usage (
    subject TEXT NOT NULL, agent TEXT NOT NULL, model TEXT NOT NULL,
    calls INTEGER NOT NULL, prompt_tokens INTEGER NOT NULL, completion_tokens INTEGER NOT NULL,
    PRIMARY KEY (subject, agent, model)
);
"""

# Version 2: consensus meetings (core/meetings). Projections of the meeting.* events.
MEETINGS_SCHEMA = """
CREATE TABLE meetings (
    id TEXT PRIMARY KEY, topic TEXT NOT NULL, participants TEXT NOT NULL,
    summarizer TEXT NOT NULL, max_rounds INTEGER NOT NULL, summary_tokens INTEGER NOT NULL,
    agent_timeout_s REAL NOT NULL, meeting_timeout_s REAL NOT NULL, status TEXT NOT NULL,
    rounds INTEGER NOT NULL, result TEXT, end_reason TEXT, detail TEXT NOT NULL,
    minutes_path TEXT, started_at REAL NOT NULL, ended_at REAL, last_seq INTEGER NOT NULL,
    stop_requested INTEGER NOT NULL DEFAULT 0, stop_by TEXT, stop_reason TEXT
);
CREATE INDEX meetings_by_status ON meetings(status, started_at);
CREATE TABLE meeting_rounds (
    meeting_id TEXT NOT NULL, round INTEGER NOT NULL, summary_in_tokens INTEGER NOT NULL,
    consensus TEXT, reason TEXT NOT NULL, agree INTEGER, disagree INTEGER, neutral INTEGER,
    started_at REAL NOT NULL, ended_at REAL,
    PRIMARY KEY (meeting_id, round)
);
CREATE TABLE meeting_replies (
    meeting_id TEXT NOT NULL, round INTEGER NOT NULL, agent TEXT NOT NULL, status TEXT NOT NULL,
    raw TEXT NOT NULL, stance TEXT NOT NULL, why TEXT NOT NULL, model TEXT NOT NULL,
    prompt_tokens INTEGER NOT NULL, completion_tokens INTEGER NOT NULL, elapsed_s REAL NOT NULL,
    seq INTEGER NOT NULL, at REAL NOT NULL,
    PRIMARY KEY (meeting_id, round, agent)
);
CREATE TABLE meeting_summaries (
    meeting_id TEXT NOT NULL, round INTEGER NOT NULL, text TEXT NOT NULL,
    tokens INTEGER NOT NULL, cap INTEGER NOT NULL, truncated INTEGER NOT NULL,
    note TEXT NOT NULL, prompt_tokens INTEGER NOT NULL, completion_tokens INTEGER NOT NULL,
    seq INTEGER NOT NULL, at REAL NOT NULL,
    PRIMARY KEY (meeting_id, round)
);
"""

# Version 3: Lobster-compatible workflow runs (core/workflows). A paused run is rebuilt from
# workflow_steps.result, so these are the whole resume state.
WORKFLOWS_SCHEMA = """
CREATE TABLE workflow_runs (
    id TEXT PRIMARY KEY, num INTEGER NOT NULL UNIQUE, name TEXT NOT NULL, file TEXT NOT NULL,
    args TEXT NOT NULL, steps TEXT NOT NULL, digest TEXT NOT NULL, status TEXT NOT NULL,
    waiting_step TEXT, gate TEXT, resume_at INTEGER, approval_id TEXT, token_hash TEXT,
    request TEXT, identity TEXT, input_schema TEXT, subject TEXT,
    output TEXT, error TEXT, started_by TEXT NOT NULL, started_at REAL NOT NULL,
    ended_at REAL, updated_at REAL NOT NULL, last_seq INTEGER NOT NULL
);
CREATE INDEX workflow_runs_by_status ON workflow_runs(status, num);
CREATE TABLE workflow_steps (
    run_id TEXT NOT NULL, step_id TEXT NOT NULL, idx INTEGER NOT NULL, kind TEXT NOT NULL,
    parent TEXT, status TEXT NOT NULL, attempts INTEGER NOT NULL, result TEXT, error TEXT,
    started_at REAL, ended_at REAL, seq INTEGER NOT NULL,
    PRIMARY KEY (run_id, step_id)
);
"""

# Version 5: agent turns (core/agents/turns.py) and the cost of every model call.
TURNS_SCHEMA = """
ALTER TABLE usage ADD COLUMN cost_usd REAL NOT NULL DEFAULT 0;
CREATE TABLE turns (
    id TEXT PRIMARY KEY, subject TEXT NOT NULL, agent TEXT NOT NULL, model TEXT NOT NULL,
    status TEXT NOT NULL, stop_reason TEXT, rounds INTEGER NOT NULL, model_calls INTEGER,
    tool_calls INTEGER NOT NULL, prompt_tokens INTEGER, completion_tokens INTEGER,
    cost_usd REAL, text TEXT, error TEXT, started_at REAL NOT NULL, ended_at REAL,
    last_seq INTEGER NOT NULL
);
CREATE INDEX turns_by_subject ON turns(subject, started_at);
CREATE TABLE turn_tools (
    turn_id TEXT NOT NULL, call_id TEXT NOT NULL, round INTEGER NOT NULL, name TEXT NOT NULL,
    arguments TEXT NOT NULL, status TEXT NOT NULL, error_kind TEXT, result TEXT,
    called_seq INTEGER NOT NULL, at REAL NOT NULL,
    PRIMARY KEY (turn_id, call_id)
);
"""

# Version 4: pinned tool definitions (core/tools). One row per tool ever listed: the
# definition last seen, the one pinned, and the pin approval pending for the seen one.
TOOL_PINS_SCHEMA = """
CREATE TABLE tool_pins (
    name TEXT PRIMARY KEY, server TEXT NOT NULL, seen_sha256 TEXT NOT NULL,
    seen_definition TEXT NOT NULL, seen_at REAL NOT NULL, pinned_sha256 TEXT,
    pinned_definition TEXT, pinned_by TEXT, pinned_at REAL, approval_id TEXT,
    approval_status TEXT, last_seq INTEGER NOT NULL
);
CREATE INDEX tool_pins_by_approval ON tool_pins(approval_id);
"""

# Version 6: sessions, agent specs, turn jobs, backlog and announces (core/sessions, seed
# 004). `session_announces.run_id` is the announce idempotency key (with the events'
# idem_key `announce:<run_id>`): a run announces once.
SESSIONS_SCHEMA = """
CREATE TABLE agent_specs (
    agent_id TEXT PRIMARY KEY, name TEXT NOT NULL UNIQUE, config_json TEXT NOT NULL,
    source TEXT NOT NULL, created_at REAL NOT NULL, updated_at REAL NOT NULL,
    last_seq INTEGER NOT NULL
);
CREATE TABLE sessions (
    id TEXT PRIMARY KEY, num INTEGER NOT NULL UNIQUE, title TEXT NOT NULL,
    agent_id TEXT NOT NULL, provider_override TEXT, model_override TEXT,
    deliver INTEGER NOT NULL, channel TEXT NOT NULL, parent_id TEXT, hop INTEGER NOT NULL,
    trace_id TEXT NOT NULL, run_id TEXT, task TEXT NOT NULL, spawn_key TEXT,
    status TEXT NOT NULL,
    result TEXT, stop_requested INTEGER NOT NULL DEFAULT 0, active_job TEXT,
    turns INTEGER NOT NULL DEFAULT 0, prompt_tokens INTEGER NOT NULL DEFAULT 0,
    completion_tokens INTEGER NOT NULL DEFAULT 0, cost_usd REAL NOT NULL DEFAULT 0,
    created_by TEXT NOT NULL, created_at REAL NOT NULL, updated_at REAL NOT NULL,
    last_seq INTEGER NOT NULL
);
CREATE INDEX sessions_by_parent ON sessions(parent_id, num);
CREATE INDEX sessions_by_parent_status ON sessions(parent_id, status);
CREATE UNIQUE INDEX sessions_by_spawn_key ON sessions(parent_id, spawn_key);
CREATE INDEX sessions_by_status ON sessions(status, num);
CREATE TABLE session_messages (
    seq INTEGER PRIMARY KEY, session_id TEXT NOT NULL, msg_id TEXT NOT NULL UNIQUE,
    role TEXT NOT NULL, text TEXT NOT NULL, meta TEXT NOT NULL, at REAL NOT NULL
);
CREATE INDEX session_messages_by_session ON session_messages(session_id, seq);
CREATE TABLE session_inbox (
    msg_id TEXT PRIMARY KEY, session_id TEXT NOT NULL, text TEXT NOT NULL,
    sender TEXT NOT NULL, status TEXT NOT NULL, job_id TEXT, seq INTEGER NOT NULL,
    at REAL NOT NULL, taken_at REAL
);
CREATE INDEX session_inbox_by_session ON session_inbox(session_id, status, seq);
CREATE TABLE session_backlog (
    item_id TEXT PRIMARY KEY, session_id TEXT NOT NULL, kind TEXT NOT NULL,
    text TEXT NOT NULL, data TEXT NOT NULL, status TEXT NOT NULL, drained_by TEXT,
    seq INTEGER NOT NULL, at REAL NOT NULL
);
CREATE INDEX session_backlog_by_session ON session_backlog(session_id, status, seq);
CREATE TABLE session_announces (
    run_id TEXT PRIMARY KEY, parent_id TEXT NOT NULL, child_id TEXT NOT NULL,
    msg_id TEXT NOT NULL, agent_id TEXT NOT NULL, agent_name TEXT NOT NULL,
    status TEXT NOT NULL, summary TEXT NOT NULL, meta TEXT NOT NULL, tokens INTEGER NOT NULL,
    cost_usd REAL NOT NULL, consumed_by TEXT, seq INTEGER NOT NULL, at REAL NOT NULL
);
CREATE INDEX session_announces_by_parent ON session_announces(parent_id, seq);
CREATE INDEX session_announces_fresh ON session_announces(parent_id, consumed_by);
CREATE TABLE session_deliveries (
    seq INTEGER PRIMARY KEY, session_id TEXT NOT NULL, channel TEXT NOT NULL,
    msg_id TEXT NOT NULL, text TEXT NOT NULL, at REAL NOT NULL
);
CREATE TABLE turn_jobs (
    id TEXT PRIMARY KEY, session_id TEXT NOT NULL, status TEXT NOT NULL, reason TEXT NOT NULL,
    owner TEXT, attempt INTEGER NOT NULL DEFAULT 0, turn_id TEXT, agent_id TEXT,
    provider TEXT, model TEXT, took TEXT NOT NULL DEFAULT '[]', steers INTEGER NOT NULL
    DEFAULT 0, stop_reason TEXT, error TEXT, reply_msg_id TEXT,
    prompt_tokens INTEGER NOT NULL DEFAULT 0, completion_tokens INTEGER NOT NULL DEFAULT 0,
    cost_usd REAL NOT NULL DEFAULT 0, queued_at REAL NOT NULL, started_at REAL,
    ended_at REAL, queued_seq INTEGER NOT NULL, last_seq INTEGER NOT NULL
);
CREATE INDEX turn_jobs_by_status ON turn_jobs(status, queued_seq);
CREATE INDEX turn_jobs_by_session ON turn_jobs(session_id, queued_seq);
"""

# Triggers (migration 8, core/triggers/): every invocation with its queue lane and status;
# the dedupe keys seen; the last cron fire per trigger; how far the channel scan got.
TRIGGERS_SCHEMA = """
CREATE TABLE trigger_items (
    id TEXT PRIMARY KEY, seq INTEGER NOT NULL, expert TEXT NOT NULL, trigger TEXT NOT NULL,
    process TEXT NOT NULL, source TEXT NOT NULL, lane TEXT NOT NULL, mode TEXT NOT NULL,
    status TEXT NOT NULL, dedupe TEXT, payload TEXT NOT NULL, inputs TEXT NOT NULL,
    attempt INTEGER NOT NULL DEFAULT 0, not_before REAL NOT NULL DEFAULT 0, owner TEXT,
    run_id TEXT, error TEXT, action TEXT, result TEXT, warning TEXT NOT NULL DEFAULT '',
    received_at REAL NOT NULL, started_at REAL, ended_at REAL, last_seq INTEGER NOT NULL
);
CREATE INDEX trigger_items_waiting ON trigger_items(seq) WHERE status IN ('queued', 'retry');
CREATE INDEX trigger_items_by_status ON trigger_items(status, seq);
CREATE INDEX trigger_items_by_lane ON trigger_items(lane, seq);
CREATE INDEX trigger_items_by_trigger ON trigger_items(expert, trigger, seq);
CREATE INDEX trigger_items_by_run ON trigger_items(run_id);
CREATE TABLE trigger_dedupe (
    expert TEXT NOT NULL, trigger TEXT NOT NULL, key TEXT NOT NULL, item_id TEXT NOT NULL,
    until REAL NOT NULL, PRIMARY KEY (expert, trigger, key)
);
CREATE TABLE trigger_cron (
    expert TEXT NOT NULL, trigger TEXT NOT NULL, last_fire REAL NOT NULL, item_id TEXT NOT NULL,
    PRIMARY KEY (expert, trigger)
);
CREATE TABLE trigger_cursor (name TEXT PRIMARY KEY, seq INTEGER NOT NULL);
"""

# Webhook authentication failures (migration 12, core/triggers/ratelimit.py): one row per
# refused credential and per throttle episode, for `triggers list` and the console.
HOOK_AUTH_SCHEMA = """
CREATE TABLE trigger_auth_failures (
    seq INTEGER PRIMARY KEY, expert TEXT NOT NULL, trigger TEXT NOT NULL,
    address TEXT NOT NULL, kind TEXT NOT NULL, reason TEXT NOT NULL, error_id TEXT NOT NULL,
    at REAL NOT NULL
);
CREATE INDEX trigger_auth_failures_by_trigger ON trigger_auth_failures(expert, trigger, at);
"""

ACP_SCHEMA = """
CREATE TABLE acp_runs (
    id TEXT PRIMARY KEY, harness TEXT NOT NULL, workspace TEXT NOT NULL, subject TEXT NOT NULL,
    prompt TEXT NOT NULL, command TEXT NOT NULL, grp TEXT NOT NULL, driver TEXT NOT NULL,
    status TEXT NOT NULL, stop_reason TEXT, error TEXT NOT NULL DEFAULT '',
    text TEXT NOT NULL DEFAULT '', protocol_version INTEGER, agent_info TEXT NOT NULL
    DEFAULT '{}', acp_session_id TEXT NOT NULL DEFAULT '', cancel_requested INTEGER NOT NULL
    DEFAULT 0, started_at REAL NOT NULL, ended_at REAL, last_seq INTEGER NOT NULL
);
CREATE INDEX acp_runs_by_status ON acp_runs(status, started_at);
CREATE INDEX acp_runs_by_subject ON acp_runs(subject, started_at);
CREATE TABLE acp_tool_calls (
    run_id TEXT NOT NULL, call_id TEXT NOT NULL, title TEXT NOT NULL, kind TEXT NOT NULL,
    status TEXT NOT NULL, locations TEXT NOT NULL, content TEXT NOT NULL,
    first_seq INTEGER NOT NULL, last_seq INTEGER NOT NULL, PRIMARY KEY (run_id, call_id)
);
CREATE TABLE acp_evidence (
    seq INTEGER PRIMARY KEY, run_id TEXT NOT NULL, kind TEXT NOT NULL, body TEXT NOT NULL,
    at REAL NOT NULL
);
CREATE INDEX acp_evidence_by_run ON acp_evidence(run_id, seq);
CREATE TABLE acp_permissions (
    approval_id TEXT PRIMARY KEY, run_id TEXT NOT NULL, harness TEXT NOT NULL,
    workspace TEXT NOT NULL, call_id TEXT NOT NULL, tool_kind TEXT NOT NULL,
    title TEXT NOT NULL, locations TEXT NOT NULL, command TEXT NOT NULL, options TEXT NOT NULL,
    status TEXT NOT NULL, outcome TEXT, option_id TEXT, option_kind TEXT, source TEXT,
    rule_id TEXT, answered_by TEXT, answered_at REAL, requested_at REAL NOT NULL,
    seq INTEGER NOT NULL
);
CREATE INDEX acp_permissions_by_run ON acp_permissions(run_id, seq);
CREATE TABLE acp_rules (
    id TEXT PRIMARY KEY, workspace TEXT NOT NULL, harness TEXT NOT NULL,
    tool_kind TEXT NOT NULL, decision TEXT NOT NULL, approval_id TEXT NOT NULL,
    created_by TEXT NOT NULL, created_at REAL NOT NULL, active INTEGER NOT NULL,
    revoked_by TEXT, revoked_at REAL, reason TEXT NOT NULL DEFAULT ''
);
CREATE INDEX acp_rules_by_key ON acp_rules(workspace, harness, tool_kind, active);
CREATE TABLE acp_writes (
    idem_key TEXT PRIMARY KEY, run_id TEXT NOT NULL, path TEXT NOT NULL, sha256 TEXT NOT NULL,
    size INTEGER NOT NULL, status TEXT NOT NULL, intended_at REAL NOT NULL, done_at REAL
);
CREATE INDEX acp_writes_by_status ON acp_writes(status);
"""

FLOWS_SCHEMA = """
CREATE TABLE flows (
    id TEXT PRIMARY KEY, num INTEGER NOT NULL, agent TEXT NOT NULL, instruction TEXT NOT NULL,
    status TEXT NOT NULL, result TEXT, error TEXT, root_task TEXT NOT NULL,
    limits TEXT NOT NULL, split INTEGER NOT NULL DEFAULT 0,
    nodes INTEGER NOT NULL DEFAULT 1, done INTEGER NOT NULL DEFAULT 0,
    tokens INTEGER NOT NULL DEFAULT 0, ignored INTEGER NOT NULL DEFAULT 0,
    created_by TEXT NOT NULL, created_at REAL NOT NULL, updated_at REAL NOT NULL,
    ended_at REAL, last_seq INTEGER NOT NULL
);
CREATE TABLE flow_tasks (
    task_id TEXT PRIMARY KEY, flow_id TEXT NOT NULL, parent_id TEXT, local_id TEXT NOT NULL,
    depth INTEGER NOT NULL, ord INTEGER NOT NULL, agent TEXT NOT NULL,
    instruction TEXT NOT NULL, context TEXT NOT NULL, depends_on TEXT NOT NULL,
    dependents TEXT NOT NULL, waiting INTEGER NOT NULL, open_children INTEGER NOT NULL
    DEFAULT 0, children INTEGER NOT NULL DEFAULT 0, status TEXT NOT NULL, mode TEXT,
    result TEXT, error TEXT, tokens INTEGER NOT NULL DEFAULT 0, session_id TEXT,
    task_msg TEXT, dispatched_at REAL, started_at REAL, ended_at REAL, last_seq INTEGER NOT NULL
);
CREATE INDEX flow_tasks_open ON flow_tasks(flow_id, status);
CREATE INDEX flow_tasks_by_parent ON flow_tasks(parent_id, ord);
CREATE TABLE flow_messages (
    msg_id TEXT PRIMARY KEY, flow_id TEXT NOT NULL, task_id TEXT NOT NULL, kind TEXT NOT NULL,
    from_agent TEXT NOT NULL, to_agent TEXT NOT NULL, body TEXT NOT NULL,
    context TEXT NOT NULL, status TEXT NOT NULL, seq INTEGER NOT NULL, at REAL NOT NULL,
    processed_at REAL
);
CREATE INDEX flow_messages_to ON flow_messages(to_agent, status, seq);
CREATE INDEX flow_messages_from ON flow_messages(from_agent, seq);
CREATE TABLE flow_ignored (
    seq INTEGER PRIMARY KEY, flow_id TEXT NOT NULL, msg_id TEXT NOT NULL,
    task_id TEXT NOT NULL, kind TEXT NOT NULL, agent TEXT NOT NULL, reason TEXT NOT NULL,
    at REAL NOT NULL
);
CREATE INDEX flow_ignored_by_agent ON flow_ignored(agent, seq);
CREATE TABLE flow_sessions (
    flow_id TEXT NOT NULL, agent TEXT NOT NULL, session_id TEXT NOT NULL,
    PRIMARY KEY (flow_id, agent)
);
"""

PROJECTION_TABLES: dict[str, str] = {
    # table -> ORDER BY used to compare live and rebuilt projections
    "tasks": "id",
    "phase_history": "seq",
    "reviews": "seq",
    "attempts": "task_id, n",
    "retries": "seq",
    "artifacts": "seq",
    "side_effects": "effect_id",
    "approvals": "id",
    "refusals": "seq",
    "leases": "name",
    "usage": "subject, agent, model",
    "meetings": "id",
    "meeting_rounds": "meeting_id, round",
    "meeting_replies": "meeting_id, round, agent",
    "meeting_summaries": "meeting_id, round",
    "workflow_runs": "id",
    "workflow_steps": "run_id, step_id",
    "turns": "id",
    "turn_tools": "turn_id, call_id",
    "tool_pins": "name",
    "agent_specs": "agent_id",
    "sessions": "id",
    "session_messages": "seq",
    "session_inbox": "msg_id",
    "session_backlog": "item_id",
    "session_announces": "run_id",
    "session_deliveries": "seq",
    "turn_jobs": "id",
    "acp_runs": "id",
    "acp_tool_calls": "run_id, call_id",
    "acp_evidence": "seq",
    "acp_permissions": "approval_id",
    "acp_rules": "id",
    "acp_writes": "idem_key",
    "flows": "id",
    "flow_tasks": "task_id",
    "flow_messages": "msg_id",
    "flow_ignored": "seq",
    "flow_sessions": "flow_id, agent",
    "trigger_items": "id",
    "trigger_dedupe": "expert, trigger, key",
    "trigger_cron": "expert, trigger",
    "trigger_cursor": "name",
    "trigger_auth_failures": "seq",
    "auth_failures": "seq",
    "console_sessions": "sid_sha256",
    "memories": "id",
    "memory_fts": "mid",  # the FTS5 index: its rows compared like any table's
    "embedding_cache": "sha, model",
    "memory_vectors": "id, model",
}

# Version 11: the migration ledger. One row per migration applied to this file: its name, the
# sha256 of its script as the build that applied it had it, and when (migrations applied
# before the ledger existed are recorded when it is created). Schema metadata, not a
# projection: no event builds it and a replay leaves it alone.
MIGRATION_LEDGER_SCHEMA = """
CREATE TABLE schema_migrations (
    version INTEGER PRIMARY KEY, name TEXT NOT NULL, checksum TEXT NOT NULL,
    applied_at REAL NOT NULL
);
"""
LEDGER_VERSION = 11

# v13: who runs a flow's executed nodes when `flow run --executor` named it (issue 21)
FLOWS_EXECUTOR_SCHEMA = """
ALTER TABLE flows ADD COLUMN executor TEXT NOT NULL DEFAULT '';
"""

# v14: agent memory (core/memory, issue 25). `memory_fts` is an FTS5 index over the live
# memories' content and key (BM25 recall), kept by the projection handlers like any table;
# `memory_vocab` is a read-only view of its terms' document counts (no rows of its own).
MEMORY_SCHEMA = """
CREATE TABLE memories (
    id INTEGER PRIMARY KEY, namespace TEXT NOT NULL, key TEXT NOT NULL, content TEXT NOT NULL,
    category TEXT NOT NULL, source_session TEXT NOT NULL, source_turn TEXT NOT NULL,
    reason TEXT NOT NULL, created_by TEXT NOT NULL, updated_by TEXT NOT NULL,
    created_at REAL NOT NULL, updated_at REAL NOT NULL, expires_at REAL,
    forgotten INTEGER NOT NULL, forgotten_reason TEXT NOT NULL, last_seq INTEGER NOT NULL,
    UNIQUE (namespace, key)
);
CREATE VIRTUAL TABLE memory_fts USING fts5(content, key, mid UNINDEXED,
    tokenize='porter unicode61');
CREATE VIRTUAL TABLE memory_vocab USING fts5vocab(memory_fts, row);
"""
MEMORY_VERSION = 14

# v16: memory embeddings (core/memory/hybrid.py, issue 25 item 2), both kept by the
# `memory.embedded` events: `embedding_cache` holds one float32 vector per (content sha256,
# model), so the same text is never embedded twice; `memory_vectors` links a live memory to
# the vector of its current content. `last_seq` indexed: the in-process vector index asks
# MAX(last_seq) before every hybrid recall to see whether any memory changed.
EMBEDDINGS_SCHEMA = """
CREATE TABLE embedding_cache (
    sha TEXT NOT NULL, model TEXT NOT NULL, dim INTEGER NOT NULL, vec BLOB NOT NULL,
    PRIMARY KEY (sha, model)
);
CREATE TABLE memory_vectors (
    id INTEGER NOT NULL, model TEXT NOT NULL, sha TEXT NOT NULL, seq INTEGER NOT NULL,
    PRIMARY KEY (id, model)
);
CREATE INDEX memories_last_seq ON memories (last_seq);
"""
EMBEDDINGS_VERSION = 16

# The orchestrator's scan (`actionable`, on every wake-up) probes each waiting task's latest
# approval for its kind and status: with both in the index the probe never reads the row
# (~30% of the scan with 250 tasks awaiting approval; BENCHMARKS.md, issue 24).
APPROVALS_PROBE_VERSION = 19
APPROVALS_PROBE_SCHEMA = """
DROP INDEX approvals_by_subject;
CREATE INDEX approvals_by_subject ON approvals(subject, seq, kind, status);
"""

# v20 (issue 35): what several `serve` / `console --web` processes on one store share, and a
# restart keeps. `auth_failures`: the refused credentials that count towards a limiter's
# window (core/triggers/ratelimit.py), per scope ("hook:<expert>/<trigger>", "console") and
# source address; each failure's projection drops its scope's rows older than its window, so
# the table holds about one window. `console_sessions`: the web console's signed-in browsers
# (core/signin), by the SHA-256 of the session cookie (never the cookie itself).
SHARED_AUTH_VERSION = 20
SHARED_AUTH_SCHEMA = """
CREATE TABLE auth_failures (
    seq INTEGER PRIMARY KEY, scope TEXT NOT NULL, address TEXT NOT NULL, at REAL NOT NULL
);
CREATE INDEX auth_failures_by_address ON auth_failures(scope, address, at);
CREATE INDEX auth_failures_by_scope ON auth_failures(scope, at);
CREATE TABLE console_sessions (
    sid_sha256 TEXT PRIMARY KEY, operator TEXT NOT NULL, token_sha256 TEXT NOT NULL,
    signed_in_at REAL NOT NULL, expires_at REAL NOT NULL, seq INTEGER NOT NULL
);
CREATE INDEX console_sessions_by_seq ON console_sessions(seq);
"""

# (version, script). Version 1 creates everything; later versions append here.
MIGRATIONS: list[tuple[int, str]] = [
    (1, LOG_SCHEMA + PROJECTION_SCHEMA_V1),
    (2, MEETINGS_SCHEMA),
    (3, WORKFLOWS_SCHEMA),
    (4, TOOL_PINS_SCHEMA),
    (5, TURNS_SCHEMA),
    (6, SESSIONS_SCHEMA),
    (9, ACP_SCHEMA),
    (7, FLOWS_SCHEMA),
    (8, TRIGGERS_SCHEMA),
    (LEDGER_VERSION, MIGRATION_LEDGER_SCHEMA),
    (12, HOOK_AUTH_SCHEMA),
    (13, FLOWS_EXECUTOR_SCHEMA),
    (MEMORY_VERSION, MEMORY_SCHEMA),
    (EMBEDDINGS_VERSION, EMBEDDINGS_SCHEMA),
    (APPROVALS_PROBE_VERSION, APPROVALS_PROBE_SCHEMA),
    (SHARED_AUTH_VERSION, SHARED_AUTH_SCHEMA),
]
MIGRATIONS.sort()  # applied in version order whatever order they were listed in

# Every projection table as the latest version has it (replays build into a fresh database).
PROJECTION_SCHEMA = (PROJECTION_SCHEMA_V1 + MEETINGS_SCHEMA + WORKFLOWS_SCHEMA + TURNS_SCHEMA
                     + TOOL_PINS_SCHEMA + SESSIONS_SCHEMA + FLOWS_SCHEMA + TRIGGERS_SCHEMA
                     + ACP_SCHEMA + HOOK_AUTH_SCHEMA + FLOWS_EXECUTOR_SCHEMA
                     + MEMORY_SCHEMA + EMBEDDINGS_SCHEMA + APPROVALS_PROBE_SCHEMA
                     + SHARED_AUTH_SCHEMA)

LATEST_VERSION = max(v for v, _ in MIGRATIONS)
