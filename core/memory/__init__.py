"""Agent memory (issue 25, milestone 0): namespaced memories as events with a projection and
an FTS5 (BM25) index, recalled under a spec's `context_policy.recall`.

Modules: events (memory.stored / memory.forgotten), projections (the `memories` table and
its `memory_fts` index), service (write commands, reads, recall), policy (what a spec may
read/write and recall)."""
