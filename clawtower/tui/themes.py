"""Console themes are YAML files in `themes/`, validated before Textual ever sees them.

A theme file names a Textual theme's colours plus the console's own variables:

    name: clawtower-dark
    dark: true
    primary: "#5fafd7"
    background: "#0f1419"
    variables:
      phase-waiting: "#e6b450"

Each file is checked by a pydantic model (unknown fields refused, every colour parsed by
`textual.color.Color.parse`). A bad file is reported as `file: field 'x': reason` and skipped;
it never stops the console from starting.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any

import pydantic
from pydantic import AfterValidator, BaseModel, ConfigDict, Field, field_validator
from textual.color import Color, ColorParseError
from textual.theme import Theme

from clawtower.core import ClawError
from clawtower.core.assets import asset
from clawtower.core.config import home
from clawtower.core.safe_yaml import load_file

# The console's own CSS variables. Every one needs a fallback (see `variable_defaults`),
# because a built-in Textual theme does not define them.
CUSTOM_VARIABLES = ("phase-waiting", "phase-active", "phase-done", "phase-failed", "phase-idle",
                    "stance-agree", "stance-disagree", "stance-neutral", "stance-unknown")

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


@dataclass
class ThemeLoad:
    """What loading a folder of themes gave: the good ones and one line per bad file."""

    themes: list[Theme] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    sources: dict[str, Path] = field(default_factory=dict)


def _problem(path: Path, exc: pydantic.ValidationError) -> str:
    err = exc.errors()[0]
    loc = ".".join(str(x) for x in err["loc"]) or "(root)"
    msg = str(err["msg"])
    if err["type"] == "extra_forbidden":
        msg = "unknown field"
    elif msg.startswith("Value error, "):
        msg = msg[len("Value error, "):]
    more = f" (+{exc.error_count() - 1} more)" if exc.error_count() > 1 else ""
    return f"{path}: field '{loc}': {msg}{more}"


def load_theme_file(path: Path) -> Theme:
    """Load one theme file; raises ValueError with a `file: field: reason` message."""
    try:
        data: Any = load_file(path)
    except ClawError as exc:
        raise ValueError(str(exc)) from None
    except OSError as exc:
        raise ValueError(f"{path}: cannot read ({exc.strerror})") from None
    if not isinstance(data, dict):
        raise ValueError(f"{path}: a theme must be a mapping, got {type(data).__name__}")
    try:
        return ThemeFile.model_validate(data).to_theme()
    except pydantic.ValidationError as exc:
        raise ValueError(_problem(path, exc)) from None


def load_themes(*folders: Path) -> ThemeLoad:
    """Load every *.yaml / *.yml theme in `folders`; later folders override earlier names."""
    out = ThemeLoad()
    by_name: dict[str, Theme] = {}
    for folder in folders:
        if not folder.is_dir():
            continue
        files = sorted([*folder.glob("*.yaml"), *folder.glob("*.yml")])
        for path in files:
            try:
                theme = load_theme_file(path)
            except ValueError as exc:
                out.problems.append(str(exc))
                continue
            by_name[theme.name] = theme
            out.sources[theme.name] = path
    out.themes = list(by_name.values())
    return out


def theme_folders() -> list[Path]:
    """Where themes come from: the ones shipped in the package (themes/), then
    $CLAWTOWER_HOME/themes, then $CLAWTOWER_THEMES (a folder) if set."""
    folders = [asset("themes"), home() / "themes"]
    extra = os.environ.get("CLAWTOWER_THEMES")
    if extra:
        folders.append(Path(extra).expanduser())
    return folders


def variable_defaults(theme: Theme | None) -> dict[str, str]:
    """Fallbacks for the console's variables, derived from the active theme's colours."""

    def pick(value: str | None, fallback: str) -> str:
        return value if value else fallback

    dark = theme.dark if theme is not None else True
    t = theme
    return {
        "phase-waiting": pick(t.warning if t else None, "#d7a04b"),
        "phase-active": pick((t.accent or t.primary) if t else None, "#4fa3d8"),
        "phase-done": pick(t.success if t else None, "#5fa35f"),
        "phase-failed": pick(t.error if t else None, "#d75f5f"),
        "phase-idle": "#8a8f98" if dark else "#6a6f78",
        "stance-agree": pick(t.success if t else None, "#5fa35f"),
        "stance-disagree": pick(t.error if t else None, "#d75f5f"),
        "stance-neutral": pick(t.warning if t else None, "#d7a04b"),
        "stance-unknown": "#8a8f98" if dark else "#6a6f78",
    }
