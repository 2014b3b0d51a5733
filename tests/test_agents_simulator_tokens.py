"""The simulator's token count (its usage figures, which tests and budgets read) is one
function of the text, whichever way it is computed: ASCII text is matched on its bytes, any
other text as str, and both must count every character class the same."""

from __future__ import annotations

import random
import re

from clawtower.core.agents.tokens import count_tokens

_REFERENCE = re.compile(r"\w+|[^\w\s]")  # the definition: words and punctuation


def test_every_ascii_character_counts_as_the_str_pattern_counts_it() -> None:
    # \x1c-\x1f are whitespace to str's \s but not to bytes' \s: the fast path must agree
    for i in range(128):
        text = f"a{chr(i)}b {chr(i)}{chr(i)} x"
        assert count_tokens(text) == len(_REFERENCE.findall(text)), hex(i)


def test_random_ascii_and_unicode_texts_count_the_same_as_the_definition() -> None:
    rng = random.Random(7)
    alphabet = [chr(i) for i in range(128)] + list("éß漢字 😀\u2003\u00a0")
    for n in range(300):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 80)))
        assert count_tokens(text + str(n)) == len(_REFERENCE.findall(text + str(n))), text


def test_a_long_prompt_is_counted_whole() -> None:
    line = '- @agent:worker S-12 -> ok: "part 5 of 1000: do the thing" and more, here.\n'
    assert count_tokens(line * 1000) == 1000 * len(_REFERENCE.findall(line))


def test_a_text_with_a_few_other_characters_counts_as_the_definition_counts_it() -> None:
    # a reply quoting a clipped text carries "…"; the count must not change with the path
    rng = random.Random(11)
    others = list("…éß漢字😀\u2003\u00a0\u2028·—’")
    for n in range(300):
        text = "".join(rng.choice([chr(rng.randrange(128)), rng.choice(others)])
                       for _ in range(rng.randint(0, 120)))
        assert count_tokens(text + str(n)) == len(_REFERENCE.findall(text + str(n))), text
    many = "".join(chr(0x4E00 + i) + " ," for i in range(40))  # more than the few: matched
    assert count_tokens(many) == len(_REFERENCE.findall(many))
