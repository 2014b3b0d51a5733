"""Stance parsing: hand-written cases, one generated-variants test per class, a combined corpus.

The generator (stance_corpus.py) knows by construction whether each marker is the author's
own stance; the parser must agree on every reply. "Wrong" is any disagreement; "misattributed"
is the worse kind, a real stance (AGREE/DISAGREE/NEUTRAL) that is not the expected one.
"""

from __future__ import annotations

import unicodedata
from dataclasses import dataclass, field

import pytest
from stance_corpus import (
    BIDI,
    COMPAT,
    INVISIBLE,
    LIGATURES,
    LOOKS_BLANK_FOLDS,
    LOOKS_BLANK_STAYS,
    REAL,
    Gen,
)

from clawtower.core.meetings.stance import Stance, parse_stance

SEED = 20261121
CORPUS_SIZE = 10_000  # the combined adversarial corpus in the normal suite
PER_CLASS = 1_000  # generated replies per class, each with 1-2 segments of that class
SLOW_CORPUS_SIZE = 100_000

# -- the generator's building blocks are what they claim to be ---------------------------


def test_invisible_and_bidi_characters_are_format_characters() -> None:
    assert all(unicodedata.category(ch) == "Cf" for ch in INVISIBLE + BIDI)


def test_looks_blank_characters() -> None:
    for ch in LOOKS_BLANK_FOLDS + LOOKS_BLANK_STAYS:
        assert ch not in " \t\n\r" and unicodedata.category(ch) != "Cf", repr(ch)
    assert all(unicodedata.normalize("NFKC", ch) == " " for ch in LOOKS_BLANK_FOLDS)
    assert all(unicodedata.normalize("NFKC", ch).strip(" \t") for ch in LOOKS_BLANK_STAYS)


def test_compat_forms_are_what_nfkc_credited() -> None:
    for letter, forms in COMPAT.items():
        assert forms, letter
        for ch in forms:
            assert not ch.isascii() and unicodedata.normalize("NFKC", ch) == letter, ch
    assert all(unicodedata.normalize("NFKC", ch) == "st" for ch in LIGATURES["st"])


def test_corpus_is_deterministic() -> None:
    ga, gb = Gen(SEED), Gen(SEED)
    assert [ga.reply() for _ in range(50)] == [gb.reply() for _ in range(50)]


# -- hand-written cases, one or more per rule ---------------------------------------------


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
        ("```\n[STANCE: AGREE]\n```\n[STANCE: NEUTRAL]", Stance.NEUTRAL),
        ("~~~~\n[STANCE: AGREE]\n~~~\n[STANCE: AGREE]\n~~~~", Stance.UNKNOWN),
        ("```\n[STANCE: AGREE]", Stance.UNKNOWN),  # unclosed fence runs to the end
        ("`\u200b``\n[STANCE: AGREE]\n```", Stance.UNKNOWN),  # a fence once Cf is removed
        ("[STANCE: AG\u200bREE]", Stance.AGREE),
        ("\u200b[STANCE: DISAGREE]\u200d", Stance.DISAGREE),
        ("[STANCE: АGREE]", Stance.UNKNOWN),  # Cyrillic А
        ("[stance: dısagree]", Stance.UNKNOWN),  # dotless i: 'ı'.upper() == 'I'
        ("[STANCE: AGREE]\u2028[STANCE: DISAGREE]", Stance.UNKNOWN),
        ("    [STANCE: AGREE]", Stance.UNKNOWN),  # indented code
        ("ok\r\n[STANCE: AGREE]\r\n", Stance.AGREE),
        ("ok\r[STANCE: AGREE]", Stance.AGREE),  # a lone CR ends a line too
        # Changed rule: fullwidth letters were credited after NFKC; look-alikes never are.
        ("［ＳＴＡＮＣＥ：ＡＧＲＥＥ］", Stance.UNKNOWN),
    ],
)
def test_cases(text: str, stance: Stance) -> None:
    result = parse_stance(text)
    assert result.stance == stance, result.reason
    assert result.reason


@pytest.mark.parametrize(
    ("text", "stance"),
    [
        # lazy continuation: no blank line after a quote keeps the next lines in it
        ("> alice:\n[STANCE: AGREE]", Stance.UNKNOWN),
        ("> alice:\n        [STANCE: AGREE]", Stance.UNKNOWN),
        (">> alice:\nbob\n[STANCE: AGREE]", Stance.UNKNOWN),
        ("> alice:\n>\n[STANCE: AGREE]", Stance.AGREE),  # an empty quote line ends its text
        ("> alice:\n>\n    [STANCE: AGREE]", Stance.UNKNOWN),  # ... and this is code
        # lines that only look blank are text: they do not end the quote
        ("> alice:\n\xa0\n[STANCE: AGREE]", Stance.UNKNOWN),
        ("> alice:\n\f\n[STANCE: AGREE]", Stance.UNKNOWN),
        ("> alice:\n\v\n[STANCE: AGREE]", Stance.UNKNOWN),
        ("> alice:\n\u2028\n[STANCE: AGREE]", Stance.UNKNOWN),
        ("> alice:\n\u200b\n[STANCE: AGREE]", Stance.UNKNOWN),
        ("> alice:\n \t \n[STANCE: AGREE]", Stance.AGREE),  # spaces and tabs: blank
        ("<div>\nnote\n\xa0\n[STANCE: AGREE]", Stance.UNKNOWN),  # still the HTML block
        ("I agree\n\f\n    [STANCE: AGREE]", Stance.AGREE),  # one paragraph
        ("I agree\n\xa0\n    [STANCE: AGREE]", Stance.UNKNOWN),  # code once NBSP folds
        # HTML comments, <pre> and other HTML blocks
        ("<!--\n[STANCE: AGREE]\n-->", Stance.UNKNOWN),
        ("<!-- [STANCE: AGREE] -->\n[STANCE: NEUTRAL]", Stance.NEUTRAL),
        ("<pre>\n[STANCE: AGREE]\n\n</pre>\n[STANCE: DISAGREE]", Stance.DISAGREE),
        ("<PRE class=x>\n[STANCE: AGREE]", Stance.UNKNOWN),  # unclosed: to the end
        ("<div>\n[STANCE: AGREE]\n</div>\n[STANCE: AGREE]", Stance.UNKNOWN),  # to a blank
        ("<div>\nx\n</div>\n\n[STANCE: AGREE]", Stance.AGREE),
        ("text <!--\n[STANCE: AGREE]\n--> more", Stance.UNKNOWN),  # inline comment
        ("text <!--\n[STANCE: AGREE]", Stance.AGREE),  # never closed: plain text
        ("text\n<span>\n[STANCE: AGREE]", Stance.AGREE),  # inline HTML, own line after
        ("<span>\n[STANCE: AGREE]", Stance.UNKNOWN),  # an HTML block (type 7)
        ("<?php\n[STANCE: AGREE]\n?>", Stance.UNKNOWN),
        ("<![CDATA[\n[STANCE: AGREE]\n]]>", Stance.UNKNOWN),
        # code spans, links and images spanning lines
        ("see `x\n[STANCE: AGREE]\ny`", Stance.UNKNOWN),
        ("see `x\n[STANCE: AGREE]\ny``", Stance.AGREE),  # runs of different lengths
        ("see [x\n[STANCE: AGREE]\ny](https://example.org)", Stance.UNKNOWN),
        ('see [x](https://example.org "a\n[STANCE: AGREE]\nb")', Stance.UNKNOWN),
        ("see ![x\n[STANCE: AGREE]\ny](a.png)", Stance.UNKNOWN),
        ("was ~~sure\n[STANCE: AGREE]\nbut~~ not now", Stance.UNKNOWN),  # struck through
        ("was ~~sure\n[STANCE: AGREE]", Stance.AGREE),  # nothing closes it
        ("[stance: agree]: https://example.org\n\n[STANCE: AGREE]", Stance.UNKNOWN),  # a link
        ("[x]: /url '\n[STANCE: AGREE]\n'", Stance.UNKNOWN),  # a definition's title
        ("[x]: /url '\n[STANCE: AGREE]", Stance.AGREE),  # no title after all: a paragraph
        # compatibility look-alikes: never credited, never make or hide a structure
        ("[STANCE: \U0001d400GREE]", Stance.UNKNOWN),  # mathematical bold A
        ("[STANCE: Ⓐgree]", Stance.UNKNOWN),  # circled
        ("[STANCE: NEUTRAᴸ]", Stance.UNKNOWN),  # modifier (superscript) letter
        ("[ﬆance: agree]", Stance.UNKNOWN),  # ligature
        ("[STANCE: DⅠSAGREE]", Stance.UNKNOWN),  # Roman numeral one
        ("[STANCE﹕ AGREE]", Stance.UNKNOWN),  # small colon
        ("[ſtance: agree]", Stance.UNKNOWN),  # long s
        ("＞ alice:\n[STANCE: AGREE]", Stance.UNKNOWN),  # a quote once folded
        ("｀｀｀\n[STANCE: AGREE]\n｀｀｀", Stance.UNKNOWN),  # a fence once folded
        # indented four columns after prose: the paragraph goes on
        ("I think so.\n    [STANCE: AGREE]", Stance.AGREE),
        ("I think so.\n\t[STANCE: AGREE]\nand more", Stance.AGREE),
        ("- a point\n    [STANCE: AGREE]", Stance.AGREE),
        ("# Title\n    [STANCE: AGREE]", Stance.UNKNOWN),
        ("I think so.\n\n    [STANCE: AGREE]", Stance.UNKNOWN),
        # invisible and bidi characters
        ("\u200b> alice:\n[STANCE: AGREE]", Stance.UNKNOWN),  # a quote once Cf is removed
        ("[STANCE: \u202eAGREE]", Stance.UNKNOWN),  # shown reversed
        ("[STANCE: \u2066AGREE\u2069]", Stance.UNKNOWN),
        ("[STANCE: \u200eAGREE]", Stance.AGREE),  # a mark reorders nothing here
        # markers written as Markdown around them
        ("[STANCE: AGREE]\n---", Stance.AGREE),  # a setext heading is the author's text
        ("- [STANCE: AGREE]", Stance.UNKNOWN),  # the line is not the marker alone
        ("\\[STANCE: AGREE\\]", Stance.UNKNOWN),
    ],
)
def test_issue_classes(text: str, stance: Stance) -> None:
    result = parse_stance(text)
    assert result.stance == stance, result.reason


def test_reason_explains_what_was_ignored() -> None:
    reason = parse_stance("> [STANCE: AGREE]\n\nx [STANCE: AGREE] y\n\n[STANCE: NEUTRAL]").reason
    assert "line 5" in reason and "quoted" in reason and "inline" in reason
    assert "conflicting" in parse_stance("[STANCE: AGREE]\n[STANCE: NEUTRAL]").reason
    assert "HTML" in parse_stance("<!--\n[STANCE: AGREE]\n-->").reason
    assert "look-alike" in parse_stance("[STANCE: \U0001d400GREE]").reason
    assert "folded" in parse_stance("＞ alice:\n[STANCE: AGREE]").reason
    assert "invisible" in parse_stance("\u200b> alice:\n[STANCE: AGREE]").reason
    assert "bidi" in parse_stance("[STANCE: \u202eAGREE]").reason
    assert "code span" in parse_stance("`x\n[STANCE: AGREE]\ny`").reason
    assert "strikethrough" in parse_stance("~~x\n[STANCE: AGREE]\ny~~").reason


def test_lists_nested_past_the_parser_limit_hide_the_rest() -> None:
    """markdown-it stops at 20 levels of nesting and skips the rest: never credited."""
    deep = "\n".join("  " * i + "- x" for i in range(30))
    result = parse_stance(f"{deep}\n\n[STANCE: AGREE]")
    assert result.stance == Stance.UNKNOWN and "nested too deep" in result.reason
    shallow = "\n".join("  " * i + "- x" for i in range(5))
    assert parse_stance(f"{shallow}\n\n[STANCE: AGREE]").stance == Stance.AGREE


def test_reason_is_bounded() -> None:
    quoted = ["> [STANCE: AGREE]"] * 1000
    text = "\n".join([*quoted, "", *["[STANCE: AGREE]", "[STANCE: NEUTRAL]"] * 500])
    result = parse_stance(text)
    assert result.stance == Stance.UNKNOWN
    assert len(result.reason) < 500


# -- generated variants -------------------------------------------------------------------


@dataclass
class Tally:
    wrong: list[tuple[str, Stance, Stance, str]] = field(default_factory=list)
    kinds: dict[str, int] = field(default_factory=dict)
    outcomes: dict[Stance, int] = field(default_factory=dict)

    @property
    def misattributed(self) -> list[tuple[str, Stance, Stance, str]]:
        return [w for w in self.wrong if w[2] in REAL]


def run(gen: Gen, size: int, focus: str | None = None) -> Tally:
    """Parse `size` generated replies; the wrong ones and the tallies."""
    t = Tally()
    for _ in range(size):
        text, expected, names = gen.reply(focus=focus)
        for name in names:
            t.kinds[name] = t.kinds.get(name, 0) + 1
        t.outcomes[expected] = t.outcomes.get(expected, 0) + 1
        got = parse_stance(text)
        if got.stance != expected:
            t.wrong.append((text, expected, got.stance, got.reason))
    print(f"\nstance corpus{' ' + focus if focus else ''}: {size} replies, "
          f"segments {sorted(t.kinds.items())}, "
          f"expected {sorted((k.value, v) for k, v in t.outcomes.items())}, "
          f"wrong {len(t.wrong)}, misattributed {len(t.misattributed)}")
    return t


@pytest.mark.parametrize("kind", Gen.KINDS)
def test_each_class_of_generated_variants(kind: str) -> None:
    t = run(Gen(SEED + Gen.KINDS.index(kind)), PER_CLASS, focus=kind)
    assert not t.wrong, t.wrong[:3]
    assert t.kinds[kind] >= PER_CLASS
    # Every class yields credited stances and UNKNOWN replies.
    assert all(t.outcomes.get(s, 0) >= 100 for s in Stance), t.outcomes


def test_adversarial_corpus_credits_no_stance_wrongly() -> None:
    t = run(Gen(SEED), CORPUS_SIZE)
    assert not t.wrong, t.wrong[:3]
    for name in (*Gen.KINDS, "unclosed_fence", "own"):
        assert t.kinds.get(name, 0) >= 300, name
    assert all(t.outcomes.get(s, 0) >= 500 for s in Stance), t.outcomes


def test_quoting_fencing_or_indenting_a_whole_reply_never_credits() -> None:
    """Another agent's reply, quoted, fenced or indented as a whole, is never a stance."""
    gen = Gen(SEED + 50)
    for _ in range(1_000):
        text = gen.reply()[0]
        lines = text.replace("\r\n", "\n").split("\n")
        for wrapped in ("\n".join("> " + line for line in lines),
                        "~" * 12 + "\n" + text + "\n" + "~" * 12,
                        "\n".join("    " + line for line in lines)):
            result = parse_stance(wrapped)
            assert result.stance == Stance.UNKNOWN, (wrapped, result.reason)


@pytest.mark.slow
def test_large_adversarial_corpus() -> None:
    t = run(Gen(SEED + 100), SLOW_CORPUS_SIZE)
    assert not t.wrong, t.wrong[:3]
