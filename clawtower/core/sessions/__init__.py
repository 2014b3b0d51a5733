"""Sessions, agent specs, steering and subagents (seed 004, Zeroclaw), on the one store.

Three primitives, all events in the store (`events.py`, projections in `projections.py`):

- **Session**: a transcript of messages (role user | assistant | announce, text,
  `meta_json`), `active_agent_id`, a provider/model override, a deliver policy, a route
  (channel), a parent (children are subagents), a status (idle, queued, running, stopped,
  finished).
- **AgentSpec** (`specs.py`): `defaults` (provider, model, temperature, system_prompt),
  `policy` (tools, skills, subagents allow-lists), `context_policy` (history, announces,
  budgets). Importable from `clawtower.yaml`, editable from the CLI.
- **TurnJob**: a queued unit that runs exactly one turn (`runner.py`, on
  `core.agents.turns.run_turn`); at most one active per session, across processes: the
  worker's lease `worker:<owner>` and a check in the claiming commit that no other job of
  the session runs under a live worker.

Write API (`service.Sessions`): `set_spec`, `import_specs`, `create`, `send` (steers a busy
session at its next safe boundary, else the message waits in the backlog), `stop`,
`spawn` (a child on the internal channel, deliver=false), `set_agent`, `set_model`; the
slash commands `/agents /agent /models /model /stop /spawn` in `commands.py`.

Read API, for the console and the CLI (each one read snapshot, plain dicts):

- `Sessions.list()` / `Sessions.tree(root=None)`: sessions (a forest: each node has
  `children`), with status, agent, tokens, cost;
- `Sessions.get(id)`: one session with `messages` (the transcript), `backlog`, `pending`,
  `announces`, `jobs`, `children`;
- `Sessions.changed_since(seq)`: only the sessions whose row changed after an event seq
  (a live list with thousands of sessions redraws those alone);
- `Sessions.transcript(id, after_seq=N)`: messages after a sequence number (follow a
  transcript live: pass the last seq seen, after `store.wait_for_change`);
- `Sessions.backlog(id)`, `Sessions.announces(id)`, `Sessions.specs()`, `Sessions.spec(ref)`.

The worker (`runner.SessionRunner`) runs in `clawtower session run`, in `session send`
(until the session is quiet), and anywhere else an engine runs.
"""
