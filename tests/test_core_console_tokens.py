"""Web console tokens (core/console_tokens.py): kept only as hashes, one per operator,
rotated, the printed link used once; a broken file is refused naming the field."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from clawtower.core import console_tokens
from clawtower.core.errors import ValidationError


@pytest.fixture(autouse=True)
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("CLAWTOWER_HOME", str(tmp_path))
    return tmp_path


def test_a_token_is_stored_only_as_its_hash_in_a_0600_file() -> None:
    token = console_tokens.issue("alice")
    assert token.startswith("ct_") and len(token) >= 40
    path = console_tokens.tokens_file()
    text = path.read_text()
    assert token not in text and token[3:] not in text
    assert console_tokens.digest(token) in text
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    t = console_tokens.verify(token)
    assert t is not None and t.operator == "alice" and not t.link_used
    assert t.fingerprint == "sha256:" + console_tokens.digest(token)[:16]
    assert console_tokens.verify(token + "x") is None
    assert console_tokens.verify("") is None


def test_rotation_replaces_one_operator_and_keeps_the_others() -> None:
    old = console_tokens.issue("alice")
    bob = console_tokens.issue("bob")
    h = console_tokens.digest(old)
    assert console_tokens.current("alice", h)
    new = console_tokens.issue("alice")
    assert console_tokens.verify(old) is None and not console_tokens.current("alice", h)
    assert console_tokens.verify(new).operator == "alice"  # type: ignore[union-attr]
    assert console_tokens.verify(bob).operator == "bob"  # type: ignore[union-attr]


def test_the_link_is_marked_used_once_and_survives_a_reload() -> None:
    token = console_tokens.issue("alice")
    t = console_tokens.verify(token)
    assert t is not None
    console_tokens.mark_link_used(t)
    again = console_tokens.verify(token)
    assert again is not None and again.link_used
    fresh = console_tokens.issue("alice")  # a rotation's link works once again
    assert not console_tokens.verify(fresh).link_used  # type: ignore[union-attr]


@pytest.mark.parametrize("text, field", [
    ("- a\n- b\n", "must be a mapping of operator names"),
    ("alice: 3\n", "alice: must be a mapping"),
    ("alice: {sha256: abc}\n", "alice.sha256: must be 64 lower-case hex digits"),
    (f"alice: {{sha256: {'a' * 64}, link_used: 'yes'}}\n", "alice.link_used"),
    (f"alice: {{sha256: {'a' * 64}, created: 'now'}}\n", "alice.created"),
    (f"'al ice': {{sha256: {'a' * 64}}}\n", "'al ice' is not a name"),
    (f"'..': {{sha256: {'a' * 64}}}\n", "'..' is not a name"),
    ("# " + "x" * (2 << 20) + "\n", "larger than 1048576 bytes"),  # read bounded (issue 34)
    (f"alice: {{sha256: {'a' * 64}, created: {'9' * 5000}}}\n", "a number of 5000"),
])
def test_a_broken_file_is_refused_naming_the_field(text: str, field: str) -> None:
    path = console_tokens.tokens_file()
    path.write_text(text)
    with pytest.raises(ValidationError) as err:
        console_tokens.load()
    assert str(path) in str(err.value) and field in str(err.value)


def test_an_operator_name_is_one_word() -> None:
    with pytest.raises(ValidationError, match="--by"):
        console_tokens.issue("al ice")
    assert not console_tokens.tokens_file().exists()
