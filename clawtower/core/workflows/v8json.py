"""Why a text is not JSON, worded as Node's `JSON.parse` (V8) words it.

Lobster surfaces these messages verbatim (a `.json` workflow that does not parse, `exec --json`
output that is not JSON), so the runner reproduces them: a small scanner that stops where V8's
parser stops and says what V8 says there.
"""

from __future__ import annotations

_WS = " \t\n\r"
_SPECIAL = ("NaN", "Infinity", "undefined", "[object Object]")


class _Fail(Exception):
    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class _Scanner:
    def __init__(self, text: str) -> None:
        self.s = text
        self.i = 0

    def at(self, message: str, pos: int | None = None) -> _Fail:
        return _Fail(f"{message} in JSON at position {self.i if pos is None else pos}")

    def unexpected(self) -> _Fail:
        s, i = self.s, self.i
        if i >= len(s):
            return _Fail("Unexpected end of JSON input")
        if s in _SPECIAL:
            return _Fail(f'"{s}" is not valid JSON')
        ch = s[i]
        if ch == '"':
            return self.at("Unexpected string")
        if ch == "-" or (ch.isascii() and ch.isdigit()):
            return self.at("Unexpected number")
        if len(s) <= 20:
            ctx = f'"{s}"'
        else:
            start, end = max(0, i - 10), min(len(s), i + 10)
            ctx = (("..." if i >= 10 else "") + f'"{s[start:end]}"'
                   + ("..." if end < len(s) else ""))
        return _Fail(f"Unexpected token '{ch}', {ctx} is not valid JSON")

    def ws(self) -> None:
        while self.i < len(self.s) and self.s[self.i] in _WS:
            self.i += 1

    def peek(self) -> str:
        return self.s[self.i] if self.i < len(self.s) else ""

    def value(self) -> None:
        self.ws()
        c = self.peek()
        if c == "{":
            self.obj()
        elif c == "[":
            self.arr()
        elif c == '"':
            self.string()
        elif c == "-" or (c.isdigit() and c.isascii()):
            self.number()
        elif c in ("t", "f", "n"):
            self.literal({"t": "true", "f": "false", "n": "null"}[c])
        else:
            raise self.unexpected()

    def literal(self, word: str) -> None:
        for ch in word:
            if self.peek() != ch:
                raise self.unexpected()
            self.i += 1

    def obj(self) -> None:
        self.i += 1
        self.ws()
        if self.peek() == "}":
            self.i += 1
            return
        if self.peek() != '"':
            raise self.at("Expected property name or '}'")
        first = True
        while True:
            self.string()
            self.ws()
            if self.peek() != ":":
                if first:
                    raise self.at("Expected ':' after property name")
                raise self.unexpected()
            self.i += 1
            self.value()
            self.ws()
            c = self.peek()
            if c == "}":
                self.i += 1
                return
            if c != ",":
                raise self.at("Expected ',' or '}' after property value")
            self.i += 1
            self.ws()
            if self.peek() != '"':
                raise self.at("Expected double-quoted property name")
            first = False

    def arr(self) -> None:
        self.i += 1
        self.ws()
        if self.peek() == "]":
            self.i += 1
            return
        while True:
            self.value()
            self.ws()
            c = self.peek()
            if c == "]":
                self.i += 1
                return
            if c != ",":
                raise self.at("Expected ',' or ']' after array element")
            self.i += 1

    def string(self) -> None:
        s = self.s
        self.i += 1
        while True:
            if self.i >= len(s):
                raise self.at("Unterminated string")
            c = s[self.i]
            if c == '"':
                self.i += 1
                return
            if ord(c) < 0x20:
                raise self.at("Bad control character in string literal")
            if c == "\\":
                self.i += 1
                if self.i >= len(s):
                    raise _Fail("Unexpected end of JSON input")
                e = s[self.i]
                if e == "u":
                    for _ in range(4):
                        self.i += 1
                        if self.i >= len(s) or s[self.i] not in "0123456789abcdefABCDEF":
                            raise self.at("Bad Unicode escape")
                elif e not in '"\\/bfnrt':
                    raise self.at("Bad escaped character")
            self.i += 1

    def digits(self) -> int:
        start = self.i
        while self.peek().isascii() and self.peek().isdigit():
            self.i += 1
        return self.i - start

    def number(self) -> None:
        if self.peek() == "-":
            self.i += 1
            if not (self.peek().isascii() and self.peek().isdigit()):
                raise self.at("No number after minus sign")
        if self.peek() == "0":
            self.i += 1
            if self.peek().isascii() and self.peek().isdigit():
                raise self.at("Unexpected number")
        else:
            self.digits()
        if self.peek() == ".":
            self.i += 1
            if not self.digits():
                raise self.at("Unterminated fractional number")
        if self.peek() in ("e", "E"):
            self.i += 1
            if self.peek() in ("+", "-"):
                self.i += 1
            if not self.digits():
                raise self.at("Exponent part is missing a number")


def json_error(text: str) -> str | None:
    """V8's JSON.parse message for `text`, or None when V8 would accept it."""
    sc = _Scanner(text)
    try:
        sc.value()
        sc.ws()
        if sc.i < len(text):
            raise _Fail(f"Unexpected non-whitespace character after JSON at position {sc.i}")
    except _Fail as exc:
        return exc.message
    except RecursionError:
        return "Maximum call stack size exceeded"
    return None
