"""The schema of a theme file (themes.py loads them): a pydantic model, so a user's file is
refused with `file: field 'x': reason`. Its own module: the package's themes load without it
(tests check they validate), and the console paints before pydantic loads (start-up)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated

import pydantic
from pydantic import AfterValidator, BaseModel, ConfigDict, Field, field_validator
from textual.color import Color, ColorParseError
from textual.theme import Theme

_TEXT_STYLE_WORDS = {"bold", "dim", "italic", "underline", "reverse", "strike", "none", "not",
                     "b", "i", "u", "s", "r", "blink", "underline2", "overline"}
_NAME = re.compile(r"^[a-z0-9][a-z0-9-]{0,63}$")


def _colour(value: str) -> str:
    try:
        Color.parse(value)
    except ColorParseError as exc:
        raise ValueError(f"not a colour: {value!r} ({exc})") from None
    return value


Colour = Annotated[str, AfterValidator(_colour)]


class ThemeFile(BaseModel):
    """The schema of one file in themes/."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1, max_length=64)
    dark: bool = True
    primary: Colour
    secondary: Colour | None = None
    accent: Colour | None = None
    warning: Colour | None = None
    error: Colour | None = None
    success: Colour | None = None
    foreground: Colour | None = None
    background: Colour | None = None
    surface: Colour | None = None
    panel: Colour | None = None
    boost: Colour | None = None
    luminosity_spread: float = Field(default=0.15, ge=0, le=1)
    text_alpha: float = Field(default=0.95, ge=0, le=1)
    variables: dict[str, str] = Field(default_factory=dict)

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        if not _NAME.match(v):
            raise ValueError(f"{v!r}: use lower-case letters, digits and '-'")
        return v

    @field_validator("variables")
    @classmethod
    def _variables(cls, v: dict[str, str]) -> dict[str, str]:
        for key, value in v.items():
            if not _NAME.match(key):
                raise ValueError(f"{key!r}: not a variable name")
            if not isinstance(value, str):
                raise ValueError(f"{key}: expected a string")
            if key.endswith("text-style"):
                words = value.split()
                if not words or any(w not in _TEXT_STYLE_WORDS for w in words):
                    raise ValueError(f"{key}: not a text style: {value!r}")
            else:
                try:
                    Color.parse(value)
                except ColorParseError as exc:
                    raise ValueError(f"{key}: not a colour: {value!r} ({exc})") from None
        return v

    def to_theme(self) -> Theme:
        data = self.model_dump()
        variables = data.pop("variables")
        return Theme(**data, variables=variables)


def problem(path: Path, exc: pydantic.ValidationError) -> str:
    err = exc.errors()[0]
    loc = ".".join(str(x) for x in err["loc"]) or "(root)"
    msg = str(err["msg"])
    if err["type"] == "extra_forbidden":
        msg = "unknown field"
    elif msg.startswith("Value error, "):
        msg = msg[len("Value error, "):]
    more = f" (+{exc.error_count() - 1} more)" if exc.error_count() > 1 else ""
    return f"{path}: field '{loc}': {msg}{more}"


__all__ = ["ThemeFile", "problem"]
