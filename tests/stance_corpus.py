"""Generated stance replies whose expected stance is known by construction (the oracle).

A reply is a sequence of segments. Each segment is built to have a known effect, from the
rules in core/meetings/stance.py and CommonMark, never from running a parser: an "own" marker
credits its stance; a decoy (quoted, fenced, indented, commented, look-alike letters ...)
credits nothing; the classes of the hardening issue carry both kinds, each decided where it
is built (a marker after a truly blank line ends a quote and counts, after a line of NBSP it
is a lazy continuation and does not). The reply's expected stance: no credited marker ->
UNKNOWN, one distinct stance -> it, two distinct -> UNKNOWN (invalid).

How segments are joined keeps the oracle local: a line of spaces and tabs only (CommonMark's
blank line) goes between two segments, which ends paragraphs and block quotes; a segment that
opens a list is followed by a paragraph at column 0, which closes it (else an indented decoy
after it would be list text); a segment that runs to the end of the reply (an unclosed fence
or comment) comes last.
"""

from __future__ import annotations

import random
import unicodedata
from collections.abc import Callable
from dataclasses import dataclass, field

from clawtower.core.meetings.stance import Stance

REAL = (Stance.AGREE, Stance.DISAGREE, Stance.NEUTRAL)

#: Invisible format characters (category Cf) a reader never sees: removed before matching.
INVISIBLE = ["\u200b", "\u200c", "\u200d", "\u2060", "\ufeff", "\u00ad", "\u200e", "\u200f",
             "\u061c", "\u180e"]
#: Bidi embedding/override/isolate controls: they reorder what is shown, so a marker line
#: holding one is never credited.
BIDI = ["\u202a", "\u202b", "\u202c", "\u202d", "\u202e", "\u2066", "\u2067", "\u2068",
        "\u2069"]
#: Characters a line can hold and still look blank. CommonMark's blank line is spaces and
#: tabs only, so none of them makes a line blank as written. FOLDS become a space under NFKC
#: (so the folded reading sees a blank line); STAYS never become one.
LOOKS_BLANK_FOLDS = ["\xa0", "\u2000", "\u2002", "\u2003", "\u2009", "\u200a", "\u202f",
                     "\u205f", "\u3000"]
LOOKS_BLANK_STAYS = ["\f", "\v", "\x85", "\u2028", "\u2029", "\u1680", "\u2800", "\u3164",
                     "\uffa0", "\x1c", "\x1f"]
BLANKS = ["", "", " ", "\t", "  \t "]

WORDS = [
    "the", "plan", "looks", "sound", "but", "migration", "needs", "a", "rollback", "path",
    "and", "I", "would", "keep", "cache", "small", "agree", "disagree", "neutral", "stance",
    "marker", "vote", "proposal", "budget", "risk", "latency", "tests", "cover", "most",
    "of", "it", "although", "schema", "change", "worries", "me",
]
NAMES = ["alice", "bob", "carol", "dave", "erin"]

#: Letters that look like the ASCII ones but stay non-ASCII after NFKC (homoglyphs).
HOMOGLYPH = {
    "A": "АΑ", "E": "ЕΕ", "C": "С", "T": "ТΤ", "N": "Ν", "S": "Ѕ", "I": "ІΙ",
    "G": "Ԍ", "R": "Ꭱ", "D": "Ꭰ", "a": "а", "e": "е", "c": "с", "s": "ѕ",
    "i": "іı", "n": "ո", "d": "ԁ", "g": "ɡ", ":": "꞉ː",
}


def _named(*names: str) -> str:
    out = ""
    for name in names:
        try:
            out += unicodedata.lookup(name)
        except KeyError:
            continue
    return out


def _compat_forms(ch: str) -> str:
    """Compatibility characters that NFKC turns into `ch` (the ones the old parser credited)."""
    if ch == ":":
        return _named("FULLWIDTH COLON", "SMALL COLON", "PRESENTATION FORM FOR VERTICAL COLON")
    if ch == "[":
        return _named("FULLWIDTH LEFT SQUARE BRACKET")
    if ch == "]":
        return _named("FULLWIDTH RIGHT SQUARE BRACKET")
    up = ch.upper()
    case = "CAPITAL" if ch.isupper() else "SMALL"
    forms = _named(
        *(f"MATHEMATICAL {style} {case} {up}" for style in (
            "BOLD", "ITALIC", "BOLD ITALIC", "SCRIPT", "BOLD SCRIPT", "FRAKTUR",
            "DOUBLE-STRUCK", "SANS-SERIF", "SANS-SERIF BOLD", "MONOSPACE")),
        f"DOUBLE-STRUCK {case} {up}",
        f"CIRCLED LATIN {case} LETTER {up}",
        f"FULLWIDTH LATIN {case} LETTER {up}",
        f"SQUARED LATIN CAPITAL LETTER {up}" if ch.isupper() else "",
        f"MODIFIER LETTER {case} {up}",
        f"SUPERSCRIPT LATIN SMALL LETTER {up}" if ch.islower() else "",
    )
    roman = {"I": "ONE", "V": "FIVE", "X": "TEN", "L": "FIFTY", "C": "ONE HUNDRED",
             "D": "FIVE HUNDRED", "M": "ONE THOUSAND"}
    if up in roman:
        forms += _named(("ROMAN NUMERAL " if ch.isupper() else "SMALL ROMAN NUMERAL ")
                        + roman[up])
    if ch == "s":
        forms += _named("LATIN SMALL LETTER LONG S")
    return "".join(f for f in forms if unicodedata.normalize("NFKC", f) == ch)


COMPAT = {ch: _compat_forms(ch) for ch in "STANCEAGREDISULstanceagredisul[]:"}
LIGATURES = {"st": _named("LATIN SMALL LIGATURE ST", "LATIN SMALL LIGATURE LONG S T")}


@dataclass
class Segment:
    lines: list[str]
    credited: list[Stance] = field(default_factory=list)
    opens_list: bool = False  # a column-0 paragraph must follow to close the list
    last: bool = False  # runs to the end of the reply: nothing may follow


class Gen:
    """Seeded generator of replies; `reply()` returns (text, expected stance, segment kinds)."""

    KINDS = ("inline", "quotation", "quote_block", "fence", "indented", "homoglyph",
             "malformed", "quoted_reply", "lazy", "looks_blank", "html", "inline_span",
             "compat", "indent_after_prose", "invisible")

    def __init__(self, seed: int) -> None:
        self.r = random.Random(seed)

    # -- pieces --------------------------------------------------------------------------
    def words(self, lo: int = 2, hi: int = 9) -> str:
        return " ".join(self.r.choice(WORDS) for _ in range(self.r.randint(lo, hi)))

    def sprinkle(self, text: str, p: float = 0.3, chars: list[str] = INVISIBLE) -> str:
        if self.r.random() > p:
            return text
        out = list(text)
        for _ in range(self.r.randint(1, 3)):
            out.insert(self.r.randint(0, len(out)), self.r.choice(chars))
        return "".join(out)

    def marker(self, stance: Stance) -> str:
        """A marker in plain ASCII: credited wherever it stands on its own line in prose."""
        r = self.r
        word = stance.value
        style = r.randrange(6)
        if style == 0:
            return f"[STANCE: {word}]"
        if style == 1:
            return f"[stance: {word.lower()}]"
        if style == 2:
            return "".join(c.lower() if r.random() < 0.5 else c for c in f"[STANCE: {word}]")
        if style == 3:
            sp = lambda: r.choice(["", " ", "  ", "\t"])  # noqa: E731
            return f"[{sp()}STANCE{sp()}:{sp()}{word}{sp()}]"
        if style == 4:
            return f"[STANCE:{word}]"
        return f"[Stance: {word.capitalize()}]"

    def any_marker(self) -> str:
        return self.marker(self.r.choice(REAL))

    def own_line(self, stance: Stance, lead: int = 3) -> str:
        """A marker line with up to `lead` leading spaces, invisible characters sprinkled."""
        pad = " " * self.r.randint(0, lead) if self.r.random() < 0.3 else ""
        trail = self.r.choice(["", "", " ", "\t", "  "])
        return self.sprinkle(pad + self.marker(stance) + trail, 0.4)

    def indent(self) -> str:
        """Four columns or more: indented code where it starts a block."""
        return self.r.choice(["    ", "     ", "      ", "        ", "\t", "  \t", "\t\t",
                              " " * 12])

    # -- the author's own marker and plain prose ------------------------------------------
    def own(self) -> Segment:
        stance = self.r.choice(REAL)
        return Segment([self.own_line(stance)], [stance])

    def prose(self) -> Segment:
        return Segment([self.sprinkle(self.words()) for _ in range(self.r.randint(1, 4))])

    # -- decoys that were already handled ---------------------------------------------------
    def inline(self) -> Segment:
        r = self.r
        m = self.any_marker()
        form = r.randrange(4)
        if form == 0:
            line = f"{self.words(1, 5)} {m} {self.words(1, 5)}"
        elif form == 1:
            line = f"{self.words(1, 5)} {m}"
        elif form == 2:
            line = f"{m} {self.words(1, 5)}"
        else:
            line = f"{m}{r.choice(['.', ',', ' because', ' - ', '!'])}"
        return Segment([self.sprinkle(line)])

    def quotation(self) -> Segment:
        r = self.r
        m = self.any_marker()
        q = r.choice(['"{}"', "'{}'", "“{}”", "«{}»", "`{}`", "„{}“", "``{}``"]).format(m)
        line = r.choice(
            [q, f"{r.choice(NAMES)} wrote {q}", f"As {r.choice(NAMES)} put it: {q} {self.words()}"]
        )
        return Segment([self.sprinkle(line)])

    def quote_block(self) -> Segment:
        r = self.r
        prefix = r.choice(["> ", ">", ">> ", "  > ", "   > ", "> > ", ">\t", "＞ ", "\u200b> "])
        body = [f"{r.choice(NAMES)} said:"] if r.random() < 0.5 else []
        for _ in range(r.randint(1, 4)):
            body.append(self.any_marker() if r.random() < 0.5 else self.words())
        body.append(self.any_marker())
        lines = [self.sprinkle(prefix + b) for b in body]
        if r.random() < 0.3:  # lazy continuation: still the quote
            lines.append(self.own_line(r.choice(REAL)))
        return Segment(lines)

    def quoted_reply(self) -> Segment:
        inner = self.reply(depth=1)[0]
        lines = [("> " + ln) if ln.strip(" \t\r") else ">" for ln in inner.split("\n")]
        return Segment(lines)

    def fence(self, closed: bool = True) -> Segment:
        r = self.r
        ch = r.choice("`~")
        n = r.randint(3, 5)
        info = r.choice(["", "", "text", "python", "markdown", " yaml"])
        opener = " " * r.randint(0, 3) + ch * n + info
        other = "~" if ch == "`" else "`"
        body = []
        for _ in range(r.randint(1, 5)):
            pick = r.randrange(6)
            if pick == 0:
                body.append(self.own_line(r.choice(REAL)))
            elif pick == 1:
                body.append(other * r.randint(3, 6))  # the other fence character: no close
            elif pick == 2 and n > 3:
                body.append(ch * (n - 1))  # too short to close
            elif pick == 3:
                body.append(ch * n + "x")  # text after it: no close
            elif pick == 4:
                body.append(r.choice(BLANKS))  # a blank line does not end a fence
            else:
                body.append(self.sprinkle(self.words()))
        body.append(self.own_line(r.choice(REAL), lead=8))
        lines = [opener, *body]
        if closed:
            lines.append(" " * r.randint(0, 3) + ch * (n + r.randint(0, 2)))
        return Segment(lines, last=not closed)

    def indented(self) -> Segment:
        return Segment([self.sprinkle(self.indent() + self.any_marker())])

    def homoglyph(self) -> Segment:
        r = self.r
        m = self.any_marker()
        while m.isascii():
            positions = [i for i, c in enumerate(m) if c in HOMOGLYPH]
            for i in r.sample(positions, r.randint(1, min(3, len(positions)))):
                m = m[:i] + r.choice(HOMOGLYPH[m[i]]) + m[i + 1 :]
        return Segment([self.sprinkle(m)])

    def malformed(self) -> Segment:
        w = self.r.choice(REAL).value
        line = self.r.choice(
            [
                f"[STANCE {w}]", f"[STANCE: {w}ED]", f"STANCE: {w}", "[STANCE: YES]",
                f"[[STANCE: {w}]]", f"(STANCE: {w})", "[STANCE: AGREE/DISAGREE]",
                "[STANCE: AGREE|DISAGREE|NEUTRAL]", f"**[STANCE: {w}]**", f"- [STANCE: {w}]",
                f"# [STANCE: {w}]", f"[STANCE: {w}]\u2028{self.words()}", "[STANCE: ]",
                f"[STANCE: NEUTRAL {w}]", f"[STANCE - {w}]", f"[STANCE: {w}]]",
                f"[STANCE : {w}", f"› [STANCE: {w}]", f"[STANCE: {w[:-1]}]",
                f"[POSITION: {w}]", f"[{w}]", f"<STANCE: {w}>", f"{{STANCE: {w}}}",
                f"1. [STANCE: {w}]", f"\\[STANCE: {w}\\]", f"*[STANCE: {w}]*",
            ]
        )
        opens = line.startswith(("- ", "1. "))
        return Segment([self.sprinkle(line)], opens_list=opens)

    # -- the classes of the hardening issue -------------------------------------------------
    def lazy(self) -> Segment:
        """A line right after a quoted line, with no blank line between, is still the quote
        (lazy continuation), however far it is indented. After an empty quote line (">")
        there is no paragraph to continue: the quote has ended."""
        r = self.r
        prefix = r.choice(["> ", ">", "  > ", "   > ", ">> ", "> > ", ">\t"])
        lines = [prefix + (self.any_marker() if r.random() < 0.4 else self.words())
                 for _ in range(r.randint(1, 3))]
        for i in range(r.randint(1, 3)):
            text = self.any_marker() if i == 0 or r.random() < 0.5 else self.words()
            lines.append(self.sprinkle(" " * r.choice([0, 0, 1, 2, 3, 4, 6, 8]) + text))
        if r.random() < 0.4:  # an empty quote line closes the quote's paragraph
            lines.append(r.choice([">", "> ", ">  ", ">>"]) if prefix.strip() == ">>"
                         else r.choice([">", "> ", ">  "]))
            stance = r.choice(REAL)
            if r.random() < 0.7:
                lines.append(self.own_line(stance))  # a paragraph of its own: counts
                return Segment(lines, [stance])
            lines.append(self.indent() + self.marker(stance))  # indented code
        return Segment(lines)

    def looks_blank_line(self) -> tuple[str, bool, bool]:
        """A separator line and whether it is blank as written / blank once NFKC-folded."""
        r = self.r
        if r.random() < 0.25:  # control: truly blank
            return r.choice(BLANKS), True, True
        pool = r.choice([LOOKS_BLANK_FOLDS, LOOKS_BLANK_STAYS, INVISIBLE,
                         LOOKS_BLANK_FOLDS + LOOKS_BLANK_STAYS + INVISIBLE])
        chars = [r.choice(pool) for _ in range(r.randint(1, 3))]
        for _ in range(r.randint(0, 2)):
            chars.insert(r.randint(0, len(chars)), r.choice(" \t"))
        line = "".join(chars)
        folded_blank = all(c in " \t" or c in LOOKS_BLANK_FOLDS or c in INVISIBLE for c in line)
        return line, False, folded_blank

    def looks_blank(self) -> Segment:
        """Lines that only look blank (NBSP, FF, VT, U+2028 ...) are text in CommonMark: they
        continue a quote, an HTML block or a paragraph instead of ending it."""
        r = self.r
        sep, blank, folded_blank = self.looks_blank_line()
        stance = r.choice(REAL)
        form = r.randrange(3)
        if form == 0:  # after a quote: counts only after a truly blank line
            head = [f"> {self.words()}" for _ in range(r.randint(1, 2))]
            return Segment([*head, sep, self.own_line(stance)], [stance] if blank else [])
        if form == 1:  # after an HTML block that ends at a blank line
            head = [r.choice(["<div>", "<details>", "<table>"]), self.words()]
            return Segment([*head, sep, self.own_line(stance)], [stance] if blank else [])
        # after prose, indented: a paragraph line unless some reading sees a blank line
        head = [self.words() for _ in range(r.randint(1, 2))]
        line = self.indent() + self.marker(stance)
        return Segment([*head, sep, line], [] if folded_blank else [stance])

    def html(self) -> Segment:
        """HTML blocks and comments hold raw HTML, never the author's marker; what follows
        a block's end condition is Markdown again."""
        r = self.r
        stance = r.choice(REAL)
        pad = " " * r.randint(0, 3)
        kind = r.randrange(9)
        if kind <= 4:  # types 1-5: end at a line holding the terminator (blank lines inside)
            opener, closer = [
                (r.choice(["<pre>", '<pre class="x">', "<PRE>", "<script>",
                           '<script type="text/plain">', "<style>", "<textarea>"]), ""),
                (r.choice(["<!--", "<!-- note", "<!-- " + self.words(1, 3)]), "-->"),
                (r.choice(["<?php", "<?xml " + self.words(1, 2)]), "?>"),
                (r.choice(["<!DOCTYPE html", "<!ELEMENT x"]), ">"),
                ("<![CDATA[", "]]>"),
            ][kind]
            if not closer:
                closer = "</" + opener[1:].split(">")[0].split(" ")[0] + ">"
            body = []
            for _ in range(r.randint(1, 4)):
                pick = r.randrange(4)
                if pick == 0:
                    body.append(r.choice(BLANKS))
                elif pick == 1:
                    body.append(self.sprinkle(self.words()))
                else:
                    body.append(self.own_line(r.choice(REAL), lead=8))
            body.append(self.own_line(r.choice(REAL)))
            end = r.choice([closer, f"{self.words(1, 2)} {closer}", f"{closer} {self.words(1, 2)}"])
            if r.random() < 0.2:
                return Segment([pad + opener, *body], last=True)  # unclosed: to the end
            lines = [pad + opener, *body, end]
            if r.random() < 0.5:  # right after the end line: Markdown again
                return Segment([*lines, self.own_line(stance)], [stance])
            return Segment(lines)
        if kind == 5:  # type 6: ends at a blank line, may interrupt a paragraph
            tag = r.choice(["div", "details", "table", "p", "section", "ul", "summary", "DIV"])
            head = [self.words()] if r.random() < 0.4 else []
            lines = [*head, pad + r.choice([f"<{tag}>", f'<{tag} class="note">', f"</{tag}>"])]
            lines += [self.own_line(r.choice(REAL)), self.words()][: r.randint(1, 2)]
            if r.random() < 0.5:
                lines.append(f"</{tag}>")
            lines.append(self.own_line(r.choice(REAL)))  # still inside: no blank line yet
            return Segment(lines)
        if kind == 6:  # type 7: a lone tag; cannot interrupt a paragraph
            tag = r.choice(["<span>", "<b>", "<custom-tag>", "</em>", '<a href="x">'])
            if r.random() < 0.5:
                return Segment([pad + tag, self.own_line(r.choice(REAL))])
            # after prose it is inline HTML and the marker line is the author's text
            return Segment([self.words(), tag, self.own_line(stance)], [stance])
        if kind == 7:  # inline HTML spanning lines inside a paragraph
            open_, close = r.choice([("<!--", "-->"), ('<span title="', '">x</span>'),
                                     ("<!-- " + self.words(1, 2), "--> " + self.words(1, 2))])
            return Segment([f"{self.words()} {open_}", self.own_line(r.choice(REAL)),
                            f"{close} {self.words(1, 3)}"])
        # an inline comment never closed is plain text: the marker line counts
        return Segment([f"{self.words()} <!--", self.own_line(stance)], [stance])

    def inline_span(self) -> Segment:
        """A code span, link, image or strikethrough spanning lines hides the marker line
        inside it; an opener without its closer is plain text."""
        r = self.r
        stance = r.choice(REAL)
        w = self.words(1, 3)
        mid = self.own_line(r.choice(REAL))
        kind = r.randrange(10)
        if kind == 8:  # GFM strikethrough: a struck marker is not a stance held
            return Segment([f"{w} ~~{w}", mid, f"{w}~~ {w}"])
        if kind == 0:
            n = r.randint(1, 3)
            return Segment([f"{w} {'`' * n}{w}", mid, f"{w}{'`' * n} {w}"])
        if kind == 1:
            return Segment([f"{w} [{w}", mid, f"{w}](https://example.org/{r.randint(1, 99)})"])
        if kind == 2:
            return Segment([f'{w} [{w}](https://example.org "{w}', mid, f'{w}") {w}'])
        if kind == 3:
            return Segment([f"{w} ![{w}", mid, f"{w}](figure.png)"])
        own = self.own_line(stance)
        if kind == 4:  # backtick runs of different lengths never pair
            n = r.randint(1, 3)
            m = r.choice([k for k in (1, 2, 3, 4) if k != n])
            return Segment([f"{w} {'`' * n}{w}", own, f"{w}{'`' * m} {w}"], [stance])
        if kind == 5:  # an escaped backtick opens nothing
            return Segment([f"{w} \\`{w}", own, f"{w}` {w}"], [stance])
        if kind == 6:  # brackets without a destination or definition: not a link
            return Segment([f"{w} [{w}", own, f"{w}] {w}"], [stance])
        if kind == 9:  # "~~" that cannot close (followed by a space) strikes nothing
            return Segment([f"{w} ~~{w}", own, f"{w} ~~ {w}"], [stance])
        return Segment([f"{w} `{w}", own], [stance])  # never closed

    def compat(self) -> Segment:
        """Compatibility look-alikes (mathematical, circled, superscript, fullwidth letters,
        ligatures, Roman numerals) are never credited, and never make or hide a structure."""
        r = self.r
        kind = r.randrange(5)
        if kind <= 1:
            m = self.any_marker()
            while m.isascii():
                if r.random() < 0.15 and "st" in m:
                    m = m.replace("st", r.choice(LIGATURES["st"]), 1)
                    continue
                positions = [i for i, c in enumerate(m) if COMPAT.get(c)]
                for i in r.sample(positions, r.randint(1, min(3, len(positions)))):
                    m = m[:i] + r.choice(COMPAT[m[i]]) + m[i + 1 :]
            return Segment([self.sprinkle(m)])
        if kind == 2:  # a look-alike quote prefix still quotes (lazy line after it)
            prefix = r.choice(["＞ ", "﹥ ", "＞"])
            return Segment([prefix + self.words(), self.own_line(r.choice(REAL))])
        if kind == 3:  # a look-alike fence still fences
            ch = r.choice(["｀", "～"])
            n = r.randint(3, 4)
            return Segment([ch * n, self.own_line(r.choice(REAL)), ch * n])
        return Segment(["＜!--", self.own_line(r.choice(REAL)), "--＞"])  # a comment

    def indent_after_prose(self) -> Segment:
        """Indented code cannot interrupt a paragraph: a marker indented four columns right
        after prose is a paragraph line and counts; after anything that is not a paragraph
        (a heading, a fence, a rule) it is indented code."""
        r = self.r
        stance = r.choice(REAL)
        line = self.sprinkle(self.indent() + self.marker(stance), 0.3)
        kind = r.randrange(8)
        if kind <= 1:
            tail = [self.words()] if r.random() < 0.3 else []
            return Segment([self.words() for _ in range(r.randint(1, 2))] + [line, *tail],
                           [stance])
        if kind == 2:
            return Segment([r.choice(["- ", "* ", "1. "]) + self.words(), line], [stance],
                           opens_list=True)
        if kind == 3:
            return Segment(["> " + self.words(), line])  # lazy: the quote's
        head = [
            ["# " + self.words(1, 4)],
            ["```", self.words(), "```"],
            [r.choice(["***", "___", "- - -"])],
            [self.words(1, 4), r.choice(["===", "---"])],
        ][kind - 4]
        return Segment([*head, line])

    def invisible(self) -> Segment:
        """Invisible characters are removed before matching, but can neither make nor hide
        a structure; bidi controls reorder what is shown, so they spoil a marker line."""
        r = self.r
        stance = r.choice(REAL)
        kind = r.randrange(6)
        if kind == 0:
            return Segment([self.sprinkle(self.marker(stance), 1.0)], [stance])
        if kind == 1:
            return Segment([self.sprinkle(self.marker(stance), 1.0, BIDI)])
        if kind == 2:  # a quote prefix behind a zero-width character is still a quote
            return Segment([r.choice(INVISIBLE) + "> " + self.words(),
                            self.own_line(r.choice(REAL))])
        if kind == 3:  # a zero-width "blank" line after a quote: lazy as written
            return Segment(["> " + self.words(), r.choice(INVISIBLE),
                            self.own_line(r.choice(REAL))])
        if kind == 4:  # ... and after prose, a blank line once removed: indented code
            return Segment([self.words(), r.choice(INVISIBLE),
                            self.indent() + self.any_marker()])
        opener = "`" + r.choice(INVISIBLE) + "``"  # a fence once the character is removed
        return Segment([opener, self.own_line(r.choice(REAL)), "```"], last=True)

    # -- replies -------------------------------------------------------------------------
    def segment(self, kind: str) -> Segment:
        fn: Callable[[], Segment] = getattr(self, kind)
        return fn()

    def compose(self, segments: list[tuple[str, Segment]]) -> tuple[str, Stance, list[str]]:
        r = self.r
        ordered = [s for s in segments if not s[1].last] + [s for s in segments if s[1].last]
        lines: list[str] = []
        for i, (_, seg) in enumerate(ordered):
            if i:
                lines.append(r.choice(BLANKS))
            lines.extend(seg.lines)
            if seg.opens_list:
                lines += [r.choice(BLANKS), self.words()]
        text = r.choice(["\n", "\n", "\r\n"]).join(lines)
        if r.random() < 0.05:
            text = "\ufeff" + text
        credited = {s for _, seg in ordered for s in seg.credited}
        expected = credited.pop() if len(credited) == 1 else Stance.UNKNOWN
        return text, expected, [name for name, _ in ordered]

    def reply(self, depth: int = 0, focus: str | None = None) -> tuple[str, Stance, list[str]]:
        """A reply: prose, decoys (or 1-2 segments of the `focus` class), own markers."""
        r = self.r
        kinds = [k for k in self.KINDS if depth == 0 or k != "quoted_reply"]
        segments: list[tuple[str, Segment]] = [("prose", self.prose())]
        if focus is None:
            picks = [r.choice(kinds) for _ in range(r.randint(0, 4))]
        else:
            picks = [focus] * r.randint(1, 2)
        segments += [(k, self.segment(k)) for k in picks]
        owns = r.choices([0, 1, 2, 3], weights=[35, 45, 15, 5])[0]
        for _ in range(owns):
            segments.insert(r.randint(0, len(segments)), ("own", self.own()))
        if focus is None and r.random() < 0.1:
            segments.append(("unclosed_fence", self.fence(closed=False)))
        return self.compose(segments)
