"""Deterministic stance extraction: no LLM, no regex over the raw text.

A reply carries its author's stance as one marker on a line of its own::

    [STANCE: AGREE]        (or DISAGREE, NEUTRAL)

The rules (see ../shared/reference/durability-and-security.md, "Security rules"):

1. Normalise: Unicode format characters (category Cf: zero-width space/joiners, word joiner,
   BOM, soft hyphen, bidi controls) are removed, then NFKC, then Cf removed again. Fullwidth
   or mathematical letters therefore become ASCII; Cyrillic/Greek look-alikes do not.
2. Lines are split on ``\\n`` only (``\\r\\n`` and ``\\r`` are turned into ``\\n`` first);
   U+2028 and other separators stay inside the line, so they cannot cut a marker loose from
   the prose around it.
3. Code is skipped: fenced blocks (``` or ~~~, closed by the same character at least as long;
   an unclosed fence runs to the end) and lines indented by a tab or four spaces or more.
4. Quotes are skipped: lines whose first non-blank character is ``>``, and the lines that
   follow such a line without a blank line in between (Markdown lazy continuation). Text
   inside quotation marks on a line can never be a marker, because of rule 5.
5. A marker stands on its own line: the whole line (surrounding blanks aside) is the marker.
   A marker inside prose, inline code or quotation marks is not one.
6. Case: ASCII letters match case-insensitively, so ``[stance: agree]`` counts (language
   models often write it that way, and the issue's corpus has it). The line must be pure
   ASCII after normalisation, so homoglyphs (Cyrillic ``А``, Turkish dotless ``ı`` ...) are
   never credited, even where Python's Unicode case folding would match them.
7. Several markers naming the same stance count once; two different stances make the reply
   invalid: UNKNOWN (never "the last one wins"). No marker: UNKNOWN. UNKNOWN counts as
   NEUTRAL for consensus (see consensus.py).
"""

from __future__ import annotations

import re
import unicodedata
from enum import StrEnum

from pydantic import BaseModel, ConfigDict


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
_FENCE = re.compile(r"(`{3,}|~{3,})(.*)")


def _strip_format(text: str) -> str:
    return "".join(ch for ch in text if unicodedata.category(ch) != "Cf")


def normalise(text: str) -> str:
    """Cf characters removed, NFKC, Cf removed again; line endings turned into ``\\n``."""
    text = _strip_format(unicodedata.normalize("NFKC", _strip_format(text)))
    return text.replace("\r\n", "\n").replace("\r", "\n")


def _indent(line: str) -> int:
    """Columns of leading blanks (a tab counts as four)."""
    n = 0
    for ch in line:
        if ch == " ":
            n += 1
        elif ch == "\t":
            n += 4
        else:
            break
    return n


def parse_stance(text: str) -> StanceResult:
    found: list[tuple[int, Stance]] = []
    ignored: list[str] = []
    fence: str | None = None  # the opening fence while inside a fenced block
    in_quote = False
    for number, line in enumerate(normalise(text).split("\n"), start=1):
        body = line.strip()
        if fence is not None:
            if body.startswith(fence[0]) and body == fence[0] * len(body) and len(body) >= len(
                fence
            ):
                fence = None
            elif _MARKER.search(line):
                ignored.append(f"line {number} in a code fence")
            continue
        if not body:
            in_quote = False
            continue
        opening = _FENCE.fullmatch(body)
        if opening and not (opening.group(1)[0] == "`" and "`" in opening.group(2)):
            fence = opening.group(1)
            in_quote = False
            continue
        if body.startswith(">"):
            in_quote = True
        if in_quote:
            if _MARKER.search(line):
                ignored.append(f"line {number} quoted")
            continue
        if _indent(line) >= 4:
            if _MARKER.search(line):
                ignored.append(f"line {number} indented code")
            continue
        match = _MARKER.fullmatch(body) if body.isascii() else None
        if match:
            found.append((number, Stance(match.group(1).upper())))
        elif _MARKER.search(body):
            ignored.append(f"line {number} inline, not on its own line")
        elif not body.isascii() and body.startswith("[") and body.endswith("]"):
            ignored.append(f"line {number} bracketed but not ASCII (look-alike letters?)")
    more = f" and {len(ignored) - _MAX_NOTES} more" if len(ignored) > _MAX_NOTES else ""
    note = f"; ignored: {', '.join(ignored[:_MAX_NOTES])}{more}" if ignored else ""
    distinct = sorted({s for _, s in found})
    if not found:
        return StanceResult(
            stance=Stance.UNKNOWN,
            reason=f"no marker on its own line outside code and quotes{note}",
        )
    if len(distinct) > 1:
        where = ", ".join(f"{s.value} (line {n})" for n, s in found[:_MAX_NOTES])
        return StanceResult(
            stance=Stance.UNKNOWN, reason=f"invalid: conflicting markers {where}{note}"
        )
    lines = ", ".join(str(n) for n, _ in found)
    word = "line" if len(found) == 1 else "lines"
    return StanceResult(stance=distinct[0], reason=f"marker on {word} {lines}{note}")
