"""`clawtower memory`: what agents remember (core/memory). list, show, search read; put,
forget, import write one event per changed memory (who: the operator), plus its vector's
`memory.embedded` when the config names an embedding model (`memory.embeddings`; `search` is
then hybrid and says which mode it ran in); `embed` fills in the missing vectors; export
prints a namespace as JSONL (for `memory import`) or Markdown (for audits and Git diffs)."""

from __future__ import annotations

import argparse
from collections.abc import Awaitable
from typing import TYPE_CHECKING, Any

from .common import add_config_option, db_parent, operator_name
from .stores import cli_store

if TYPE_CHECKING:
    from clawtower.core.memory.service import Memories
    from clawtower.core.store.interface import Store


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    m = subparsers.add_parser("memory", help="agent memory: list, show, search, put,"
                              " forget, export, import, embed")
    sub = m.add_subparsers(dest="memory_cmd", metavar="ACTION", parser_class=type(m),
                           required=True)
    c = [db_parent()]
    ns_help = "namespace: agent:<spec>, session:<id>, expert:<name> or shared:<name>"
    ls = sub.add_parser("list", parents=c, help="memories (of one namespace, or all)")
    ls.add_argument("namespace", nargs="?", help=ns_help)
    ls.add_argument("--all", action="store_true", help="forgotten ones too")
    ls.add_argument("--json", action="store_true", help="print JSON")
    ls.set_defaults(handler=_wrap(_list))
    sh = sub.add_parser("show", parents=c, help="one memory, with who wrote it and why")
    sh.add_argument("namespace", help=ns_help)
    sh.add_argument("key", help="the memory's key")
    sh.add_argument("--json", action="store_true", help="print JSON")
    sh.set_defaults(handler=_wrap(_show))
    se = sub.add_parser("search", parents=c, help="BM25 search of a namespace")
    se.add_argument("namespace", help=ns_help)
    se.add_argument("query", help="words to search for (plain words; no FTS5 syntax)")
    se.add_argument("-k", type=int, default=5, help="how many (default 5)")
    se.add_argument("--min-score", type=float, default=0.0,
                    help="lowest score (BM25; hybrid: the fused score, 0-1)")
    se.add_argument("--json", action="store_true", help="print JSON")
    add_config_option(se)
    se.set_defaults(handler=_wrap(_search))
    p = sub.add_parser("put", parents=c, help="store (or replace) a memory")
    p.add_argument("namespace", help=ns_help)
    p.add_argument("key", help="the memory's key (storing it again replaces it)")
    p.add_argument("text", help="what to remember")
    p.add_argument("--category", default="", help="a category (e.g. fact, preference)")
    p.add_argument("--expires", metavar="DURATION|ISO", help="when it expires: a duration"
                   " (30s, 10m, 2h, 7d) or an ISO 8601 time; expired memories are not"
                   " recalled")
    p.add_argument("--json", action="store_true", help="print JSON")
    add_config_option(p)
    p.set_defaults(handler=_wrap(_put))
    f = sub.add_parser("forget", parents=c, help="forget a memory (recorded: who, why)")
    f.add_argument("namespace", help=ns_help)
    f.add_argument("key", help="the memory's key")
    f.add_argument("--reason", required=True, help="why (recorded)")
    f.add_argument("--json", action="store_true", help="print JSON")
    f.set_defaults(handler=_wrap(_forget))
    e = sub.add_parser("export", parents=c, help="a namespace as JSONL or Markdown")
    e.add_argument("namespace", help=ns_help)
    e.add_argument("--format", choices=("jsonl", "md"), default="jsonl",
                   help="jsonl (for `memory import`) or md (for audits)")
    e.set_defaults(handler=_wrap(_export))
    i = sub.add_parser("import", parents=c, help="memories from a JSONL export (idempotent"
                       " by key; a bad line imports nothing)")
    i.add_argument("file", help="a .jsonl file from `memory export`")
    i.add_argument("--json", action="store_true", help="print JSON")
    add_config_option(i)
    i.set_defaults(handler=_wrap(_import))
    em = sub.add_parser("embed", parents=c, help="embed the memories that have no vector of"
                        " the configured model (memory.embeddings)")
    em.add_argument("namespace", nargs="?", help=ns_help + " (default: all)")
    em.add_argument("--json", action="store_true", help="print JSON")
    add_config_option(em)
    em.set_defaults(handler=_wrap(_embed))


def _wrap(fn: Any) -> Any:
    def handler(args: argparse.Namespace) -> Awaitable[int]:
        return fn(args)  # type: ignore[no-any-return]

    return handler


def _emit(args: argparse.Namespace, value: Any, text: str) -> int:
    if getattr(args, "json", False):
        from .output import emit_json

        emit_json(value)
    elif text:
        print(text)
    return 0


def _line(r: dict[str, Any]) -> str:
    cat = f" [{r['category']}]" if r.get("category") else ""
    gone = " (forgotten)" if r.get("forgotten") else " (expired)" if r.get("expired") else ""
    content = " ".join(str(r["content"]).split())
    return f"{r['namespace']} {r['key']}{cat}{gone}: {content[:100]}" \
        + ("…" if len(content) > 100 else "")


async def _list(args: argparse.Namespace) -> int:
    from clawtower.core.memory.service import Memories

    async with cli_store(args.db, read_only=True) as store:
        rows = await Memories(store).listing(args.namespace, include_forgotten=args.all)
    return _emit(args, rows, "\n".join(_line(r) for r in rows) or "no memories yet")


async def _show(args: argparse.Namespace) -> int:
    from clawtower.core.memory.service import Memories

    async with cli_store(args.db, read_only=True) as store:
        r = await Memories(store).get(args.namespace, args.key)
    text = "\n".join([
        _line(r), f"  category: {r['category'] or '-'}",
        f"  created by {r['created_by']}, updated by {r['updated_by']} (source:"
        f" {' '.join(x for x in (r['source_session'], r['source_turn']) if x) or '-'})",
        f"  reason: {r['reason'] or '-'}",
        *([f"  expires: {_iso(r['expires_at'])}" + (" (expired)" if r["expired"] else "")]
          if r["expires_at"] is not None else []),
        *([f"  forgotten: {r['forgotten_reason']}"] if r["forgotten"] else []),
        "", str(r["content"])])
    return _emit(args, r, text)


def _memories(store: Store, args: argparse.Namespace) -> Memories:
    """The memory API with the config's embedder (hybrid), if it names one. With no config
    file at all (load_config's built-in cast, which names no embedder) it is BM25 alone,
    said without loading the config models or the provider stack (issue 39)."""
    from clawtower.core.config import config_path, home

    path, asked = config_path(args.config)
    if not asked and not path.exists() and not (home() / "agents.yaml").exists():
        from clawtower.core.memory.service import Memories

        return Memories(store)
    from clawtower.core.agents.config import load_config
    from clawtower.core.memory.service import memories_for

    return memories_for(store, load_config(args.config))


def _embedded(o: dict[str, Any]) -> str:
    if "not_embedded" in o:
        return f" (not embedded: {o['not_embedded']})"
    return " (embedded)" if o.get("embedded") else ""


async def _search(args: argparse.Namespace) -> int:
    async with cli_store(args.db, read_only=True) as store:
        got = await _memories(store, args).recall([args.namespace], args.query, k=args.k,
                                                  min_score=args.min_score)
    mode = f"mode: {got.mode}" + (f" ({got.reason})" if got.reason else "")
    scores = [float(r["score"]) for r in got.rows]
    if got.mode == "bm25" and scores:
        # raw BM25 is unbounded and, over a handful of memories, near zero (FTS5 floors the
        # idf of a word most of them hold): a hit printed 0.000 read as no match. The text
        # shows each hit against the best (1.00); --json keeps the raw score.
        top = max(scores)
        scores = [s / top if top > 0 else 1.0 for s in scores]
        mode += "; score: relevance against the best hit (1.00)"
    return _emit(args, {"mode": got.mode, "reason": got.reason, "memories": got.rows},
                 "\n".join([mode, *(f"{s:.3f} {_line(r)}" for s, r in zip(scores, got.rows,
                                                                             strict=True))])
                 if got.rows else f"{mode}\nno match")


def _iso(ts: float) -> str:
    """UTC ISO time of `ts`; a number no calendar date has (an expiry of 1e308 that a
    release before issue 34 imported) is printed as it is, not an OverflowError."""
    import time

    try:
        return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(ts))
    except (OverflowError, OSError, ValueError):
        return f"{ts!r} (no calendar date)"


async def _put(args: argparse.Namespace) -> int:
    from clawtower.core.memory.service import parse_expires

    async with cli_store(args.db) as store:
        expires = None if args.expires is None else parse_expires(args.expires,
                                                                  store.clock.now())
        out = await _memories(store, args).put(args.namespace, args.key, args.text,
                                               category=args.category, by=operator_name(),
                                               reason="cli", expires_at=expires)
    return _emit(args, out, f"{args.namespace} {args.key}: {out['status']}{_embedded(out)}")


async def _embed(args: argparse.Namespace) -> int:
    async with cli_store(args.db) as store:
        out = await _memories(store, args).embed_missing(args.namespace, by=operator_name())
    return _emit(args, out, f"{out['embedded']} embedded by {out['model']}"
                 f" ({out['missing_before']} had no vector)")


async def _forget(args: argparse.Namespace) -> int:
    from clawtower.core.memory.service import Memories

    async with cli_store(args.db) as store:
        out = await Memories(store).forget(args.namespace, args.key, by=operator_name(),
                                           reason=args.reason)
    return _emit(args, out, f"{args.namespace} {args.key}: forgotten")


async def _export(args: argparse.Namespace) -> int:
    import sys

    from clawtower.core.memory.service import Memories, check_namespace, to_jsonl, to_markdown

    check_namespace(args.namespace)
    async with cli_store(args.db, read_only=True) as store:
        rows = await Memories(store).listing(args.namespace)
    sys.stdout.write(to_jsonl(rows) if args.format == "jsonl"
                     else to_markdown(args.namespace, rows))
    return 0


async def _import(args: argparse.Namespace) -> int:
    import time

    from clawtower.core.errors import ValidationError
    from clawtower.core.limits import printable, read_text
    from clawtower.core.memory.service import parse_jsonl
    from clawtower.core.memory.transfer import MAX_IMPORT_BYTES

    if args.file.endswith(".md"):
        raise ValidationError(f"{args.file}: Markdown exports are for reading; import the"
                              " JSONL export (`memory export NS --format jsonl`)")
    # every line checked (core/reader.py, and as `memory put` checks) before the store opens
    payloads = parse_jsonl(read_text(args.file, MAX_IMPORT_BYTES), printable(args.file),
                           time.time())
    async with cli_store(args.db) as store:
        out = await _memories(store, args).import_many(payloads, by=operator_name())
    counts = {s: sum(1 for o in out if o["status"] == s)
              for s in ("stored", "updated", "unchanged")}
    return _emit(args, {"file": args.file, **counts, "memories": out},
                 f"{args.file}: {counts['stored']} stored, {counts['updated']} updated,"
                 f" {counts['unchanged']} unchanged" + (_embedded(out[0]) if out else ""))
