"""Agent memory (issue 25, milestone 0): namespaced memories as events with a projection and
an FTS5 (BM25) index, recalled under a spec's `context_policy.recall`.

Modules, each importing only those below it (pyproject.toml's import-linter contract):
tools (the model's memory tools) over service (write commands, reads, recall, the turn's
hybrid recall) over hybrid (BM25 fused with vector similarity) over embeddings (the
embedding client), policy (what a spec may read/write and recall), transfer (export and
import) and projections (the `memories` table and its `memory_fts` index), over bm25 (the
FTS5 query), checks, config and events (memory.stored / memory.forgotten / memory.embedded)."""
