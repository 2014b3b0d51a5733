"""Console themes are YAML files in `themes/`, validated before Textual ever sees them.

A theme file names a Textual theme's colours plus the console's own variables:

    name: clawtower-dark
    dark: true
    primary: "#5fafd7"
    background: "#0f1419"
    variables:
      phase-waiting: "#e6b450"

Each file is checked by a pydantic model (themefile.py: unknown fields refused, every colour
parsed by `textual.color.Color.parse`). A bad file is reported as `file: field 'x': reason` and
skipped; it never stops the console from starting. The package's own themes are read as they
are (the tests validate each with the same model): the console's first paint then waits on
neither pydantic nor the model (start-up: BENCHMARKS.md).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from textual.theme import Theme

from clawtower.core import ClawError
from clawtower.core.assets import asset
from clawtower.core.config import home
from clawtower.core.safe_yaml import load_file

# The console's own CSS variables. Every one needs a fallback (see `variable_defaults`),
# because a built-in Textual theme does not define them.
CUSTOM_VARIABLES = ("phase-waiting", "phase-active", "phase-done", "phase-failed", "phase-idle",
                    "stance-agree", "stance-disagree", "stance-neutral", "stance-unknown")


@dataclass
class ThemeLoad:
    """What loading a folder of themes gave: the good ones and one line per bad file."""

    themes: list[Theme] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    sources: dict[str, Path] = field(default_factory=dict)


def load_theme_file(path: Path, *, validate: bool = True) -> Theme:
    """Load one theme file; raises ValueError with a `file: field: reason` message.
    `validate=False` is for the package's own files only (see the module's docstring)."""
    try:
        data: Any = load_file(path)
    except ClawError as exc:
        raise ValueError(str(exc)) from None
    except OSError as exc:
        raise ValueError(f"{path}: cannot read ({exc.strerror})") from None
    if not isinstance(data, dict):
        raise ValueError(f"{path}: a theme must be a mapping, got {type(data).__name__}")
    if not validate:
        fields = {k: v for k, v in data.items() if k != "variables"}
        return Theme(**fields, variables=dict(data.get("variables") or {}))
    import pydantic

    from .themefile import ThemeFile, problem

    try:
        return ThemeFile.model_validate(data).to_theme()
    except pydantic.ValidationError as exc:
        raise ValueError(problem(path, exc)) from None


def load_themes(*folders: Path) -> ThemeLoad:
    """Load every *.yaml / *.yml theme in `folders`; later folders override earlier names.
    The package's own folder is read without the model (see the module's docstring)."""
    out = ThemeLoad()
    by_name: dict[str, Theme] = {}
    shipped = asset("themes").resolve()
    for folder in folders:
        if not folder.is_dir():
            continue
        validate = folder.resolve() != shipped
        files = sorted([*folder.glob("*.yaml"), *folder.glob("*.yml")])
        for path in files:
            try:
                theme = load_theme_file(path, validate=validate)
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
