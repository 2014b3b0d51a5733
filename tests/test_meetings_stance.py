"""Stance parsing: hand-written cases and a generated adversarial corpus.

The corpus is built from segments whose effect is known by construction: an "own" marker
line credits its stance, every decoy (quoted, fenced, indented, inline, in quotation marks,
look-alike letters, malformed, another agent's whole reply quoted) credits nothing. The
expected stance of a reply is then: no credited marker -> UNKNOWN, one distinct stance -> it,
two distinct -> UNKNOWN. The parser must agree on every reply: 0 stances credited wrongly.
"""

from __future__ import annotations

import random
import unicodedata
from dataclasses import dataclass

import pytest

from core.meetings.stance import Stance, parse_stance

CORPUS_SIZE = 12_000
SEED = 20261121
REAL = (Stance.AGREE, Stance.DISAGREE, Stance.NEUTRAL)
INVISIBLE = [
    "\u200b", "\u200c", "\u200d", "\u2060", "\ufeff", "\u00ad",
    "\u200e", "\u200f", "\u202a", "\u202c", "\u202e", "\u2066", "\u2069",
]
WORDS = [
    "the", "plan", "looks", "sound", "but", "migration", "needs", "a", "rollback", "path",
    "and", "I", "would", "keep", "cache", "small", "agree", "disagree", "neutral", "stance",
    "marker", "vote", "proposal", "budget", "risk", "latency", "tests", "cover", "most",
    "of", "it", "although", "schema", "change", "worries", "me",
]
NAMES = ["alice", "bob", "carol", "dave", "erin"]

# Letters that look like the ASCII ones but stay non-ASCII after NFKC.
LOOKALIKE = {
    "A": "АΑ", "E": "ЕΕ", "C": "С", "T": "ТΤ", "N": "Ν", "S": "Ѕ", "I": "ІΙ",
    "G": "Ԍ", "R": "Ꭱ", "D": "Ꭰ", "a": "а", "e": "е", "c": "с", "s": "ѕ",
    "i": "іı", "n": "ո", "d": "ԁ", "g": "ɡ", ":": "꞉ː",
}


def test_lookalikes_survive_nfkc_as_non_ascii() -> None:
    for options in LOOKALIKE.values():
        for ch in options:
            assert not unicodedata.normalize("NFKC", ch).isascii(), ch


def test_invisible_characters_are_format_characters() -> None:
    assert all(unicodedata.category(ch) == "Cf" for ch in INVISIBLE)


@dataclass
class Segment:
    lines: list[str]
    credited: list[Stance]


class Gen:
    def __init__(self, seed: int) -> None:
        self.r = random.Random(seed)
        self.kinds: dict[str, int] = {}

    # -- pieces --------------------------------------------------------------------------
    def words(self, lo: int = 2, hi: int = 9) -> str:
        return " ".join(self.r.choice(WORDS) for _ in range(self.r.randint(lo, hi)))

    def sprinkle(self, text: str, p: float = 0.3) -> str:
        if self.r.random() > p:
            return text
        out = list(text)
        for _ in range(self.r.randint(1, 3)):
            out.insert(self.r.randint(0, len(out)), self.r.choice(INVISIBLE))
        return "".join(out)

    def marker(self, stance: Stance, styles: int = 6) -> str:
        """A marker that is valid once normalised (styles=4: ASCII forms only)."""
        r = self.r
        word = stance.value
        style = r.randrange(styles)
        if style == 4 and styles == 5:
            style = 5
        if style == 0:
            text = f"[STANCE: {word}]"
        elif style == 1:
            text = f"[stance: {word.lower()}]"
        elif style == 2:
            raw = f"[STANCE: {word}]"
            text = "".join(c.lower() if r.random() < 0.5 else c for c in raw)
        elif style == 3:
            sp = lambda: " " * r.randint(0, 2)  # noqa: E731
            text = f"[{sp()}STANCE{sp()}:{sp()}{word}{sp()}]"
        elif style == 4:  # fullwidth forms: NFKC turns them into ASCII
            text = "".join(
                chr(ord(c) + 0xFEE0) if "!" <= c <= "~" and r.random() < 0.7 else c
                for c in f"[STANCE: {word}]"
            )
        else:
            text = f"[STANCE:{word}]"
        return text

    def own_line(self, stance: Stance) -> str:
        lead = " " * self.r.randint(0, 3) if self.r.random() < 0.2 else ""
        trail = self.r.choice(["", "", " ", "\t", "  "])
        return self.sprinkle(lead + self.marker(stance) + trail, 0.4)

    def any_marker(self) -> str:
        return self.marker(self.r.choice(REAL))

    # -- segments ------------------------------------------------------------------------
    def own(self) -> Segment:
        stance = self.r.choice(REAL)
        return Segment([self.own_line(stance)], [stance])

    def prose(self) -> Segment:
        return Segment([self.sprinkle(self.words()) for _ in range(self.r.randint(1, 4))], [])

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
        return Segment([self.sprinkle(line)], [])

    def quotation(self) -> Segment:
        r = self.r
        m = self.any_marker()
        q = r.choice(['"{}"', "'{}'", "“{}”", "«{}»", "`{}`", "„{}“", "``{}``"]).format(m)
        line = r.choice(
            [q, f"{r.choice(NAMES)} wrote {q}", f"As {r.choice(NAMES)} put it: {q} {self.words()}"]
        )
        return Segment([self.sprinkle(line)], [])

    def quote_block(self) -> Segment:
        r = self.r
        prefix = r.choice(["> ", ">", ">> ", "  > ", "＞ ", "> > ", "\u200b> "])
        body = [f"{r.choice(NAMES)} said:"] if r.random() < 0.5 else []
        for _ in range(r.randint(1, 4)):
            body.append(self.any_marker() if r.random() < 0.5 else self.words())
        if not any("STANCE" in unicodedata.normalize("NFKC", b).upper() for b in body):
            body.append(self.any_marker())
        lines = [self.sprinkle(prefix + b) for b in body]
        if r.random() < 0.3:  # lazy continuation: still the quote in Markdown
            lines.append(self.own_line(r.choice(REAL)))
        return Segment(lines, [])

    def quoted_reply(self) -> Segment:
        inner = self.reply(depth=1)[0]
        lines = [("> " + ln) if ln.strip() else ">" for ln in inner.split("\n")]
        return Segment(lines, [])

    def fence(self, closed: bool = True) -> Segment:
        r = self.r
        ch = r.choice("`~")
        n = r.randint(3, 5)
        info = r.choice(["", "", "text", "python", "markdown", " yaml"])
        glyph = "｀" if ch == "`" and r.random() < 0.2 else ch  # fullwidth backtick
        opener = " " * r.randint(0, 3) + glyph * n + info
        other = "~" if ch == "`" else "`"
        body = []
        for _ in range(r.randint(1, 5)):
            pick = r.randrange(5)
            if pick == 0:
                body.append(self.own_line(r.choice(REAL)))
            elif pick == 1:
                body.append(other * r.randint(3, 6))  # the other fence character: no close
            elif pick == 2 and n > 3:
                body.append(ch * (n - 1))  # too short to close
            elif pick == 3:
                body.append(ch * n + "x")  # text after it: no close
            else:
                body.append(self.words())
        if not any("STANCE" in unicodedata.normalize("NFKC", b).upper() for b in body):
            body.append(self.own_line(r.choice(REAL)))
        lines = [self.sprinkle(opener), *(self.sprinkle(b) for b in body)]
        if closed:
            lines.append(self.sprinkle(" " * r.randint(0, 3) + ch * (n + r.randint(0, 2))))
        return Segment(lines, [])

    def indented(self) -> Segment:
        lead = self.r.choice(["    ", "      ", "\t", "  \t", "        "])
        return Segment([self.sprinkle(lead + self.marker(self.r.choice(REAL)))], [])

    def lookalike(self) -> Segment:
        r = self.r
        m = self.marker(r.choice(REAL), styles=5)  # no fullwidth forms
        while m.isascii():
            positions = [i for i, c in enumerate(m) if c in LOOKALIKE]
            for i in r.sample(positions, r.randint(1, min(3, len(positions)))):
                m = m[:i] + r.choice(LOOKALIKE[m[i]]) + m[i + 1 :]
        return Segment([self.sprinkle(m)], [])

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
            ]
        )
        return Segment([self.sprinkle(line)], [])

    # -- replies -------------------------------------------------------------------------
    def reply(self, depth: int = 0) -> tuple[str, Stance, list[str]]:
        r = self.r
        decoys = [self.inline, self.quotation, self.quote_block, self.fence, self.indented,
                  self.lookalike, self.malformed]
        if depth == 0:
            decoys.append(self.quoted_reply)
        segments: list[tuple[str, Segment]] = [("prose", self.prose())]
        for _ in range(r.randint(0, 4)):
            fn = r.choice(decoys)
            segments.append((fn.__name__, fn()))
        owns = r.choices([0, 1, 2, 3], weights=[25, 55, 15, 5])[0]
        for _ in range(owns):
            segments.insert(r.randint(0, len(segments)), ("own", self.own()))
        if r.random() < 0.1:
            segments.append(("unclosed_fence", self.fence(closed=False)))
        lines: list[str] = []
        for i, (_, seg) in enumerate(segments):
            if i:
                lines.append(r.choice(["", "", " ", "\t"]))  # a blank line between segments
            lines.extend(seg.lines)
        text = r.choice(["\n", "\n", "\r\n"]).join(lines)
        if r.random() < 0.05:
            text = "\ufeff" + text
        credited = {s for _, seg in segments for s in seg.credited}
        expected = credited.pop() if len(credited) == 1 else Stance.UNKNOWN
        return text, expected, [name for name, _ in segments]


def test_adversarial_corpus_credits_no_stance_wrongly() -> None:
    gen = Gen(SEED)
    wrong: list[tuple[str, Stance, Stance, str]] = []
    kinds: dict[str, int] = {}
    outcomes: dict[Stance, int] = {}
    for _ in range(CORPUS_SIZE):
        text, expected, names = gen.reply()
        for name in names:
            kinds[name] = kinds.get(name, 0) + 1
        outcomes[expected] = outcomes.get(expected, 0) + 1
        got = parse_stance(text)
        if got.stance != expected:
            wrong.append((text, expected, got.stance, got.reason))
    print(f"\nstance corpus: {CORPUS_SIZE} replies, segments {sorted(kinds.items())}, "
          f"expected {sorted((k.value, v) for k, v in outcomes.items())}, wrong {len(wrong)}")
    assert not wrong, wrong[:3]
    # The corpus exercises every kind of decoy and every outcome, many times.
    for name in ("inline", "quotation", "quote_block", "fence", "indented", "lookalike",
                 "malformed", "quoted_reply", "unclosed_fence", "own"):
        assert kinds.get(name, 0) >= 300, name
    assert all(outcomes.get(s, 0) >= 500 for s in Stance)


def test_corpus_is_deterministic() -> None:
    ga, gb = Gen(SEED), Gen(SEED)
    a = [ga.reply() for _ in range(50)]
    b = [gb.reply() for _ in range(50)]
    assert a == b


@pytest.mark.parametrize(
    ("text", "stance"),
    [
        ("I support it.\n\n[STANCE: AGREE]", Stance.AGREE),
        ("[stance: disagree]", Stance.DISAGREE),
        ("  [ Stance :Neutral ]  ", Stance.NEUTRAL),
        ("[STANCE: AGREE]\n[STANCE: AGREE]", Stance.AGREE),  # the same stance twice
        ("[STANCE: AGREE]\n\n[STANCE: DISAGREE]", Stance.UNKNOWN),  # invalid, not "last wins"
        ("no marker at all", Stance.UNKNOWN),
        ("I say [STANCE: AGREE] here", Stance.UNKNOWN),
        ('Bob wrote "[STANCE: AGREE]"', Stance.UNKNOWN),
        ("> [STANCE: AGREE]\n\n[STANCE: DISAGREE]", Stance.DISAGREE),
        ("> alice:\n[STANCE: AGREE]", Stance.UNKNOWN),  # lazy continuation of the quote
        ("```\n[STANCE: AGREE]\n```\n[STANCE: NEUTRAL]", Stance.NEUTRAL),
        ("~~~~\n[STANCE: AGREE]\n~~~\n[STANCE: AGREE]\n~~~~", Stance.UNKNOWN),
        ("```\n[STANCE: AGREE]", Stance.UNKNOWN),  # unclosed fence runs to the end
        ("`\u200b``\n[STANCE: AGREE]\n```", Stance.UNKNOWN),  # zero-width inside the fence
        ("[STANCE: AG\u200bREE]", Stance.AGREE),
        ("\u200b[STANCE: DISAGREE]\u200d", Stance.DISAGREE),
        ("［ＳＴＡＮＣＥ：ＡＧＲＥＥ］", Stance.AGREE),  # NFKC
        ("[STANCE: АGREE]", Stance.UNKNOWN),  # Cyrillic А
        ("[stance: dısagree]", Stance.UNKNOWN),  # dotless i: 'ı'.upper() == 'I'
        ("[STANCE: AGREE]\u2028[STANCE: DISAGREE]", Stance.UNKNOWN),
        ("    [STANCE: AGREE]", Stance.UNKNOWN),  # indented code
        ("ok\r\n[STANCE: AGREE]\r\n", Stance.AGREE),
    ],
)
def test_cases(text: str, stance: Stance) -> None:
    result = parse_stance(text)
    assert result.stance == stance, result.reason
    assert result.reason


def test_reason_explains_what_was_ignored() -> None:
    reason = parse_stance("> [STANCE: AGREE]\n\nx [STANCE: AGREE] y\n\n[STANCE: NEUTRAL]").reason
    assert "line 5" in reason and "quoted" in reason and "inline" in reason
    assert "conflicting" in parse_stance("[STANCE: AGREE]\n[STANCE: NEUTRAL]").reason


def test_reason_is_bounded() -> None:
    quoted = ["> [STANCE: AGREE]"] * 1000
    text = "\n".join([*quoted, "", *["[STANCE: AGREE]", "[STANCE: NEUTRAL]"] * 500])
    result = parse_stance(text)
    assert result.stance == Stance.UNKNOWN
    assert len(result.reason) < 500
