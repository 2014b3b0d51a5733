"""Themes are files; bad ones are reported (file, field, reason) and skipped."""

from __future__ import annotations

from pathlib import Path

import pytest
from tui_helpers import SIZE

from clawtower.tui.app import ClawtowerApp
from clawtower.tui.themefile import ThemeFile
from clawtower.tui.themes import (
    CUSTOM_VARIABLES,
    load_theme_file,
    load_themes,
    theme_folders,
)

PROJECT_THEMES = Path(__file__).resolve().parents[2] / "themes"


def test_project_themes_load_cleanly() -> None:
    result = load_themes(PROJECT_THEMES)
    assert result.problems == []
    names = {t.name for t in result.themes}
    assert {"clawtower-dark", "clawtower-light"} <= names
    assert any(t.dark for t in result.themes) and any(not t.dark for t in result.themes)
    for theme in result.themes:  # every console variable is set by our own themes
        assert set(CUSTOM_VARIABLES) <= set(theme.variables), theme.name


def test_shipped_themes_pass_the_model_that_their_loading_skips() -> None:
    """The console reads the package's themes without the model (its first paint does not
    wait on pydantic): each must pass the model, and give the same theme either way."""
    files = sorted(PROJECT_THEMES.glob("*.yaml"))
    assert len(files) >= 3
    for path in files:
        validated = load_theme_file(path)  # raises ValueError naming the file and field
        assert load_theme_file(path, validate=False) == validated, path.name


def test_a_user_folder_is_validated_even_beside_the_shipped_one(tmp_path: Path) -> None:
    (tmp_path / "odd.yaml").write_text("name: odd\nprimary: '#fff'\nshade: 3\n")
    result = load_themes(PROJECT_THEMES, tmp_path)
    assert "odd" not in {t.name for t in result.themes}
    assert any("odd.yaml: field 'shade': unknown field" in p for p in result.problems)


def test_theme_folders_start_with_the_project() -> None:
    """The shipped themes (package data; the checkout's themes/ links to them)."""
    assert theme_folders()[0].resolve() == PROJECT_THEMES.resolve()
    assert (theme_folders()[0] / "clawtower-dark.yaml").is_file()


@pytest.mark.parametrize(("text", "expected"), [
    ("name: x\nprimary: blurple\n", "field 'primary': not a colour: 'blurple'"),
    ("name: x\nprimary: '#fff'\nshade: 3\n", "field 'shade': unknown field"),
    ("primary: '#fff'\n", "field 'name': Field required"),
    ("name: Bad Name\nprimary: '#fff'\n", "field 'name': 'Bad Name'"),
    ("name: x\nprimary: '#fff'\nvariables: {phase-done: nope}\n",
     "field 'variables': phase-done: not a colour"),
    ("name: x\nprimary: '#fff'\nvariables: {block-cursor-text-style: shiny}\n",
     "not a text style"),
    ("- just\n- a list\n", "a theme must be a mapping"),
    ("name: [unclosed\n", "bad.yaml"),
])
def test_bad_theme_is_reported_with_file_and_field(tmp_path: Path, text: str,
                                                    expected: str) -> None:
    (tmp_path / "bad.yaml").write_text(text)
    (tmp_path / "good.yaml").write_text("name: good\nprimary: '#336699'\n")
    result = load_themes(tmp_path)
    assert [t.name for t in result.themes] == ["good"]
    [problem] = result.problems
    assert problem.startswith(str(tmp_path / "bad.yaml"))
    assert expected in problem


def test_model_refuses_unknown_fields() -> None:
    with pytest.raises(ValueError):
        ThemeFile.model_validate({"name": "x", "primary": "#fff", "extra": 1})


async def test_bad_theme_file_does_not_stop_the_console(tmp_path: Path, demo_db: str,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    folder = tmp_path / "mythemes"
    folder.mkdir()
    (folder / "broken.yaml").write_text("name: broken\nprimary: notacolour\n")
    (folder / "mine.yaml").write_text("name: mine\ndark: false\nprimary: '#884400'\n")
    monkeypatch.setenv("CLAWTOWER_THEMES", str(folder))
    app = ClawtowerApp(demo_db, run_engine=False, operator="alice")
    async with app.run_test(size=SIZE) as pilot:
        await app.wait_loaded()
        await pilot.pause()
        assert "mine" in app.available_themes and "broken" not in app.available_themes
        messages = [n.message for n in app._notifications]
        assert any("broken.yaml: field 'primary'" in m for m in messages)
        # a theme without the console's variables falls back to the defaults
        app.theme = "mine"
        await pilot.pause()
        assert app.theme_variables["phase-waiting"]


async def test_builtin_themes_work_thanks_to_variable_defaults(demo_db: str) -> None:
    app = ClawtowerApp(demo_db, run_engine=False, operator="alice")
    async with app.run_test(size=SIZE) as pilot:
        await app.wait_loaded()
        for name in ("textual-light", "nord", "textual-dark"):
            app.theme = name
            await pilot.pause()
            for var in CUSTOM_VARIABLES:
                assert app.theme_variables[var], (name, var)


@pytest.mark.parametrize(("wanted", "expected"), [
    (None, "clawtower-dark"), ("clawtower-light", "clawtower-light"),
    ("mine", "mine"), ("nosuch", "clawtower-dark"), ("textual-light", "textual-light"),
])
async def test_the_first_theme_is_the_one_textual_starts_with(
        tmp_path: Path, demo_db: str, monkeypatch: pytest.MonkeyPatch, wanted: str | None,
        expected: str) -> None:
    """$CLAWTOWER_THEME names the first theme (a user's too); it is the theme the app starts
    with, so the first paint has its colours (no theme change re-parses the stylesheet)."""
    folder = tmp_path / "mythemes"
    folder.mkdir()
    (folder / "mine.yaml").write_text("name: mine\ndark: false\nprimary: '#884400'\n"
                                      "background: '#fafaf0'\n")
    monkeypatch.setenv("CLAWTOWER_THEMES", str(folder))
    if wanted:
        monkeypatch.setenv("CLAWTOWER_THEME", wanted)
    app = ClawtowerApp(demo_db, run_engine=False, operator="alice")
    assert app.theme == expected  # before it runs: what App.__init__ built its colours from
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        assert app.theme == expected
        theme = app.current_theme
        assert theme.name == expected
        assert app.has_class("-dark-mode") == theme.dark
        assert app.has_class("-light-mode") == (not theme.dark)
        if theme.background:
            assert app.get_css_variables()["background"].lower() == theme.background.lower()
            assert app.screen.styles.background.hex.lower() == theme.background.lower()
