"""The ACP bridge (seed 000): external coding harnesses (Zed's example agent, codex-acp,
claude-agent-acp, ...) as executors over the Agent Client Protocol.

- `config`: harnesses as `clawtower.yaml` declares them (`acp_agents:`);
- `process`: a harness in a process group of its own, killed whole on stop;
- `client`: the client side of the protocol (updates -> events, permission requests ->
  approvals, sandboxed fs and terminals);
- `bridge`: one prompt turn, start to finish, with every fault turned into a reason;
- `permissions`: answering a permission request and the "always" rules;
- `sandbox`, `events`, `projections`: what the rest are built on.
"""
