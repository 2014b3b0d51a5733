"""The one sanitiser for untrusted text on its way to a human: the CLI's text output, the
console's widgets, Markdown minutes and exports.

Text from webhooks, models, tools and other operators is stored exactly as received (it is
evidence); only what is *shown* passes through here. A terminal obeys control characters,
so they become visible escapes instead: C0 controls (except tab and newline), DEL and C1 as
`\\xNN` (ESC too, so no CSI/OSC sequence can recolour, retitle or move the cursor; a
sequence split across writes is harmless because every character is mapped on its own),
lone surrogates as `\\udcNN`. Characters that silently reorder or hide text (bidi
embeddings, overrides and isolates, LRM/RLM/ALM, zero-width spaces and joiners, word
joiner, BOM, interlinear annotations, Unicode tag characters, line/paragraph separators)
are shown as `<U+202E>`: visible, never obeyed. `--json` output is not passed through here:
JSON escapes controls itself and stays lossless.
"""

from __future__ import annotations

import re

_SHOWN = [
    0x061C, 0x180E, 0x200B, 0x200C, 0x200D, 0x200E, 0x200F, 0x2028, 0x2029, 0x2060,
    0x2061, 0x2062, 0x2063, 0x2064, 0xFEFF, 0xFFF9, 0xFFFA, 0xFFFB,
    *range(0x202A, 0x202F),  # LRE RLE PDF LRO RLO
    *range(0x2066, 0x206A),  # LRI RLI FSI PDI
    *range(0x206A, 0x2070),  # deprecated format controls
    *range(0xE0000, 0xE0080),  # tag characters (invisible "ASCII smuggling")
]


def _table() -> dict[int, str]:
    table = {o: f"\\x{o:02x}" for o in [*range(0x00, 0x20), *range(0x7F, 0xA0)]
             if o not in (0x09, 0x0A)}
    table[0x0D] = "\\r"
    # lone surrogates (bytes that were not UTF-8)
    table.update({o: f"\\u{o:04x}" for o in range(0xD800, 0xDC80)})
    table.update({o: f"\\x{o & 0xFF:02x}" for o in range(0xDC80, 0xDD00)})
    table.update({o: f"\\u{o:04x}" for o in range(0xDD00, 0xE000)})
    table.update({o: f"<U+{o:04X}>" for o in _SHOWN})
    return table


_MULTILINE = _table()
_ONE_LINE = {**_MULTILINE, 0x0A: "\\n"}
_DROP = dict.fromkeys(_MULTILINE)


def _ranges(codes: list[int]) -> str:
    """A character class of `codes` as ranges: compiling 2,272 single characters was ~10 ms
    of every CLI process's start-up."""
    spans: list[list[int]] = []
    for o in codes:
        if spans and spans[-1][1] == o - 1:
            spans[-1][1] = o
        else:
            spans.append([o, o])
    return "[" + "".join(re.escape(chr(a)) if a == b else f"{re.escape(chr(a))}-{re.escape(chr(b))}"
                         for a, b in spans) + "]"


_UNSAFE = re.compile(_ranges(sorted(_MULTILINE)))


def safe(text: str) -> str:
    """`text` for a terminal or a Markdown file: newlines and tabs kept, every control,
    bidi or invisible formatting character made visible."""
    return text.translate(_MULTILINE)


def safe_line(text: str) -> str:
    """`safe`, and a newline shown as `\\n` too (one table cell, one title)."""
    return text.translate(_ONE_LINE)


def is_safe(text: str) -> bool:
    """True when `safe` would not change `text` (what tests assert of rendered output)."""
    return _UNSAFE.search(text) is None


def drop_unsafe(text: str) -> str:
    """`text` without the characters `safe` would escape: for a last line of defence
    after layout (they take no terminal cells there, so dropping them moves nothing)."""
    return text.translate(_DROP)
