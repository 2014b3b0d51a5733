"""Deterministic stance extraction: no LLM; a CommonMark parser decides what is the author's own.

A reply carries its author's stance as one marker on a line of its own::

    [STANCE: AGREE]        (or DISAGREE, NEUTRAL)

The rules (README "Consensus meetings"; ../shared/reference/durability-and-security.md):

1. Lines: ``\\r\\n`` and ``\\r`` become ``\\n`` and lines are split on ``\\n`` only, as in
   CommonMark. U+2028, form feed, vertical tab, NEL stay inside their line.
2. The marker is the whole line as written. Unicode format characters (category Cf: zero-width
   space/joiners, word joiner, BOM, soft hyphen, LRM/RLM) are invisible and removed first;
   whitespace around the marker is ignored; what is left must be ``[STANCE: WORD]`` in plain
   ASCII. Bidi embeddings, overrides and isolates (U+202A-E, U+2066-9) spoil the line: they
   reorder what a reader is shown. There is no NFKC: fullwidth, mathematical, circled,
   superscript letters, ligatures, Roman numerals and Cyrillic/Greek look-alikes are never
   credited.
3. Case: ASCII letters fold (``[stance: agree]`` counts; models often write it that way), and
   only ASCII letters: no Unicode case folding (long s, dotless i never match).
4. Where: the line must belong to the author's own prose as CommonMark (markdown-it-py, the
   ``commonmark`` preset) reads it: a line of a paragraph or heading outside every block quote,
   lazy continuation lines included. Fenced and indented code, HTML blocks (comments, ``<pre>``,
   ``<div>``, ...), link reference definitions, and code spans, raw HTML, links, images or
   (GFM) strikethrough spanning lines inside a paragraph are never the author's marker.
   CommonMark's blank line holds spaces and tabs only: a line of NBSP, form feed, vertical tab
   or U+2028 is text, so it does not end a quote or an HTML block; a marker indented four
   spaces right after prose continues the paragraph (indented code cannot interrupt one) and
   counts. Lists or quotes nested past the parser's limit (20 levels) hide the rest.
5. Three readings must agree that the line is own prose: the text as written, the text without
   its format characters, and the text with compatibility characters folded (NFKC). An
   invisible character or a fullwidth ``＞``/``｀`` can then neither hide a quote, a fence or a
   comment from the parser nor make one; they only ever cost a marker, never credit one.
6. Several markers naming the same stance count once; two different stances make the reply
   invalid: UNKNOWN (never "the last one wins"). No marker: UNKNOWN. UNKNOWN counts as
   NEUTRAL for consensus (see consensus.py).
"""

from __future__ import annotations

import bisect
import functools
import itertools
import re
import unicodedata
from collections.abc import Callable, Iterable, Iterator
from enum import StrEnum
from typing import TYPE_CHECKING

from pydantic import BaseModel, ConfigDict

if TYPE_CHECKING:  # markdown-it is imported on the first parse: the console starts faster
    from markdown_it import MarkdownIt
    from markdown_it.rules_inline import StateInline
    from markdown_it.token import Token


class Stance(StrEnum):
    AGREE = "AGREE"
    DISAGREE = "DISAGREE"
    NEUTRAL = "NEUTRAL"
    UNKNOWN = "UNKNOWN"


class StanceResult(BaseModel):
    """The parsed stance and why (recorded next to the raw reply)."""

    model_config = ConfigDict(frozen=True)

    stance: Stance
    reason: str


_MARKER = re.compile(
    r"\[\s*STANCE\s*:\s*(AGREE|DISAGREE|NEUTRAL)\s*\]", re.IGNORECASE | re.ASCII
)
_MAX_NOTES = 5
# Bidi embeddings, overrides and isolates: they change the order in which a line is shown.
_BIDI = re.compile("[\u202a-\u202e\u2066-\u2069]")
_SPAN = "clawtower_span"
_OPAQUE = frozenset({"code_inline", "html_inline", "link_open", "link_close", "image"})
_OWN = "own"

InlineRule = Callable[["StateInline", bool], bool]


def _spanning(rule: InlineRule) -> InlineRule:
    """Wrap an inline rule so the tokens it makes remember the source range they cover."""

    def wrapped(state: StateInline, silent: bool) -> bool:
        start, first = state.pos, len(state.tokens)
        if not rule(state, silent):
            return False
        if not silent:
            for token in state.tokens[first:]:
                token.meta.setdefault(_SPAN, (start, state.pos))
        return True

    return wrapped


@functools.cache
def _parser() -> MarkdownIt:
    from markdown_it import MarkdownIt
    from markdown_it.rules_inline import (
        autolink,
        backtick,
        html_inline,
        image,
        link,
        strikethrough,
    )

    md = MarkdownIt("commonmark")
    # GFM strikethrough is no CommonMark, but a marker struck through is not a stance held.
    md.enable("strikethrough")
    # Blocks first; inline parsing runs only on paragraphs holding a candidate line.
    md.core.ruler.disable(["inline", "text_join"])
    # Emphasis and entities never hide a line (code spans, HTML and links bind tighter).
    md.inline.ruler.disable(["emphasis", "entity"])
    for name, rule in (("backticks", backtick), ("link", link), ("image", image),
                       ("autolink", autolink), ("html_inline", html_inline),
                       ("strikethrough", strikethrough.tokenize)):
        md.inline.ruler.at(name, _spanning(rule))
    return md


_NON_ASCII = re.compile(r"[^\x00-\x7f]+")  # ASCII holds no format character


def _strip_format(text: str) -> str:
    """Without Unicode format characters (Cf)."""
    if text.isascii():
        return text
    return _NON_ASCII.sub(
        lambda m: "".join(ch for ch in m.group() if unicodedata.category(ch) != "Cf"), text
    )


def _lines(text: str) -> list[str]:
    """CommonMark's lines: split on LF, CRLF and CR only; NUL becomes U+FFFD as the parser does."""
    text = text.replace("\r\n", "\n").replace("\r", "\n").replace("\0", "\ufffd")
    return text.split("\n")


def _readings(raw: str, clean: str) -> Iterator[tuple[str, str]]:
    """The distinct readings of the text: as written, without Cf, with NFKC folding."""
    yield "", raw
    if clean != raw:
        yield "once invisible characters are removed", clean
    folded = _strip_format(unicodedata.normalize("NFKC", clean)) if not clean.isascii() else clean
    if folded not in (raw, clean):
        yield "once look-alike characters are folded", folded


def _first_content_line(source: list[str], start: int, stop: int, content: list[str]) -> int:
    """The source line of the inline content's first line (leading blank-looking lines are
    trimmed by the parser); -1 when the content cannot be placed (then nothing counts)."""
    for base in range(start, stop):
        if all(
            base + j < stop and line.strip(" \t") in source[base + j]
            for j, line in enumerate(content)
        ):
            return base
    return -1


def _inline_covered(
    token: Token, source: list[str], env: dict[str, object], wanted: set[int]
) -> set[int]:
    """Lines of `wanted` inside a code span, raw HTML, a link, an image or a strikethrough of
    this paragraph."""
    assert token.map is not None
    text = token.content
    if not any(s in text for s in ("`", "<", "](", "~~")) and not env.get("references"):
        # Nothing can open one: code spans start with a backtick, raw HTML and autolinks
        # with "<", inline links and images need "](", reference links need a definition,
        # strikethrough "~~".
        return set()
    children: list[Token] = []
    md = _parser()
    md.inline.parse(token.content, md, env, children)
    content = token.content.split("\n")
    base = _first_content_line(source, token.map[0], token.map[1], content)
    if base < 0:
        return set(wanted)
    starts = list(itertools.accumulate((len(line) + 1 for line in content[:-1]), initial=0))
    spans: set[tuple[int, int]] = set()
    struck: list[int] = []
    for child in children:
        span = child.meta.get(_SPAN)
        if span is None:
            continue
        if child.type in _OPAQUE:
            spans.add(span)
        elif child.type == "s_open":
            struck.append(span[0])
        elif child.type == "s_close" and struck:
            spans.add((struck.pop(), span[1]))
    covered: set[int] = set()
    for span in spans:
        first = bisect.bisect_right(starts, span[0]) - 1
        last = bisect.bisect_right(starts, max(span[0], span[1] - 1)) - 1
        covered.update(range(base + first, base + last + 1))
    return covered & wanted


def _where(text: str, lines: set[int], candidates: set[int]) -> dict[int, str]:
    """For each line of `lines` (0-based): "own" (author's prose) or why not."""
    source = text.split("\n")
    env: dict[str, object] = {}
    tokens = _parser().parse(text, env)
    out: dict[int, str] = {}

    def mark(span: list[int] | None, why: str) -> None:
        if span is not None:
            for n in lines.intersection(range(*span)):
                out.setdefault(n, why)

    depth = 0
    for i, token in enumerate(tokens):
        if token.type == "blockquote_open":
            if depth == 0:
                mark(token.map, "quoted")
            depth += 1
        elif token.type == "blockquote_close":
            depth -= 1
        elif depth:
            continue
        elif token.type == "fence":
            mark(token.map, "in a code fence")
        elif token.type == "code_block":
            mark(token.map, "indented code")
        elif token.type == "html_block":
            mark(token.map, "in an HTML block or comment")
        elif token.type == "inline" and token.map is not None and i and tokens[i - 1].type in (
            "paragraph_open",
            "heading_open",
        ):
            inside = lines.intersection(range(*token.map))
            hidden = _inline_covered(token, source, env, inside & candidates) if (
                inside & candidates
            ) else set()
            for n in inside:
                if n in hidden:
                    out[n] = "inside a code span, inline HTML, a link or a strikethrough"
                elif n in candidates:
                    out[n] = _OWN
                else:
                    out[n] = "inline, not on its own line"
    for n in lines - out.keys():
        # No leaf block holds it: a link reference definition, or the rest of a reply whose
        # lists or quotes nest deeper than the parser's limit (20 levels), which it skips.
        out[n] = "not prose (a link reference definition, or nested too deep)"
    return out


def _lookalike(line: str) -> bool:
    """A line that would be a marker if compatibility or look-alike letters were ASCII."""
    body = line.strip()
    if body.isascii():
        return False
    folded = unicodedata.normalize("NFKC", body)
    return (
        _MARKER.fullmatch(folded.strip()) is not None
        or (folded.startswith("[") and folded.endswith("]"))
    )


def _notes(ignored: Iterable[str]) -> str:
    items = list(ignored)
    more = f" and {len(items) - _MAX_NOTES} more" if len(items) > _MAX_NOTES else ""
    return f"; ignored: {', '.join(items[:_MAX_NOTES])}{more}" if items else ""


def parse_stance(text: str) -> StanceResult:
    """The stance one reply's author holds, and why (the rules are in the module docstring)."""
    raw = "\n".join(_lines(text))
    clean = _strip_format(raw)
    lines = clean.split("\n")
    stances: dict[int, Stance] = {}
    ignored: dict[int, str] = {}
    hits: set[int] = set()
    raw_lines = raw.split("\n")
    for n, line in enumerate(lines):
        body = line.strip()
        match = _MARKER.fullmatch(body) if body.isascii() else None
        if match and _BIDI.search(raw_lines[n]):
            ignored[n] = "bidi controls reorder what is shown"
        elif match:
            stances[n] = Stance(match.group(1).upper())
            hits.add(n)
        elif _MARKER.search(line):
            hits.add(n)
        elif _lookalike(line):
            ignored[n] = "look-alike letters, not plain ASCII"
    if hits:
        candidates = set(stances)
        for suffix, reading in _readings(raw, clean):
            if suffix and not candidates:
                break
            where = _where(reading, hits if not suffix else candidates, candidates)
            for n, why in where.items():
                if why != _OWN and n in candidates:
                    del stances[n]
                    candidates.discard(n)
                    ignored[n] = f"{why} {suffix}".rstrip()
                elif why != _OWN and n not in ignored:
                    ignored[n] = why
    note = _notes(f"line {n + 1} {why}" for n, why in sorted(ignored.items()))
    found = sorted(stances.items())
    distinct = sorted(set(stances.values()))
    if not found:
        return StanceResult(
            stance=Stance.UNKNOWN,
            reason=f"no marker on its own line in the author's own prose{note}",
        )
    if len(distinct) > 1:
        listed = ", ".join(f"{s.value} (line {n + 1})" for n, s in found[:_MAX_NOTES])
        return StanceResult(
            stance=Stance.UNKNOWN, reason=f"invalid: conflicting markers {listed}{note}"
        )
    numbers = ", ".join(str(n + 1) for n, _ in found)
    word = "line" if len(found) == 1 else "lines"
    return StanceResult(stance=distinct[0], reason=f"marker on {word} {numbers}{note}")
