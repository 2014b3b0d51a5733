"""An unknown option names the closest ones of the command it was given to and where its
usage is (issue 27, item 9), still in one line, exit 2."""

from __future__ import annotations

import pytest

from cli.main import main


@pytest.mark.parametrize(("argv", "hint"), [
    (["task", "list", "--phaze", "x"], "(did you mean --phase?); see `clawtower task list --help`"),
    (["approvals", "--jsn"], "(did you mean --json?); see `clawtower approvals --help`"),
    (["session", "show", "S-1", "--jason"], "see `clawtower session show --help`"),
    (["approvals", "--zzzzzz"], "unrecognized arguments: --zzzzzz; see `clawtower approvals"),
])
def test_unknown_option_hints(argv: list[str], hint: str,
                              capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and hint in err, err
