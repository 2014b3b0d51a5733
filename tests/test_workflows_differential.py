"""Differential tests: every workflow case in tests/workflows/corpus run as whole processes.

(a) The real Lobster CLI (npm @clawdbot/lobster, installed by scripts/install-peers.sh lobster)
    must still produce its golden file tests/workflows/expected/NAME.json: this proves the goldens
    are real Lobster behaviour. Skipped, with the reason, when the CLI is not installed.
(b) `clawtower workflow` must produce the same golden, except for the cases listed in
    tests/workflows/deviations.yaml (case -> reason, documented in docs/workflow-deviations.md),
    whose expected result is tests/workflows/expected-clawtower/NAME.json.

Envelopes and exit codes are compared after normalising tokens, approval ids, timestamps and
temporary paths (tests/workflows/harness.py); stderr too where a case sets compare_stderr.
All runs are started at once on a pool of CLAWTOWER_WF_JOBS (default 2) threads; only the
runs the selected tests need (`-k approval` runs the approval cases on both CLIs).
Regenerate the goldens with tests/workflows/record.py.

Lobster's runs are replayed when nothing they depend on changed: each run is recorded under
$CLAWTOWER_PEERS/lobster/verified/, keyed by the case and a fingerprint of the installed
Lobster (package-lock, binary), node, the harness and the whole corpus
(harness.lobster_fingerprint), so a changed case, corpus file, harness or Lobster runs for
real again; the recorded output is still compared with the golden as it is now.
CLAWTOWER_WF_LOBSTER_CACHE=0 runs every Lobster case (clawtower's side always runs).

Duration (2026-11-22, the shared 2-core machine, otherwise idle): 77 s of wall time for 111
cases on both CLIs (223 tests), ~140 s of CPU in all. A Lobster process costs ~0.25 s of CPU,
a `python -m clawtower.cli.main` process ~0.4 s, most of it imports.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent / "workflows"))

import harness as h

# one xdist worker (--dist loadgroup) runs these: the module's fixture runs every case once
pytestmark = pytest.mark.xdist_group("wfdiff")

CASES = h.load_cases()
NAMES = [c.name for c in CASES]
BY_NAME = {c.name: c for c in CASES}
DEVIATIONS = h.load_deviations()
JOBS = max(1, int(os.environ.get("CLAWTOWER_WF_JOBS", "2")))
LOBSTER_MISSING = h.lobster_missing()


CACHE = os.environ.get("CLAWTOWER_WF_LOBSTER_CACHE", "1") != "0"


class Runs:
    """Every (cli, case) run, submitted at once so both CLIs share the pool; Lobster's runs
    replayed from earlier identical runs where there are some (see the module docstring)."""

    def __init__(self, wanted: dict[str, set[str]]) -> None:
        self.pool = ThreadPoolExecutor(JOBS, thread_name_prefix="wfdiff")
        self.futures: dict[tuple[str, str], Future[dict[str, Any]]] = {}
        clis: list[h.Cli] = [h.ClawtowerCli()]
        self.verified: Path | None = None
        if LOBSTER_MISSING is None:
            clis.insert(0, h.LobsterCli())
            if CACHE and wanted.get("lobster"):
                self.verified = h.PEERS / "lobster" / "verified" / h.lobster_fingerprint()[:24]
                for stale in self.verified.parent.glob("*"):  # runs of another fingerprint
                    if stale != self.verified and stale.is_dir():
                        shutil.rmtree(stale, ignore_errors=True)
        for case in CASES:  # interleaved, so the first results of each CLI come early
            if h.case_unavailable(case):
                continue
            for cli in clis:
                if case.name in wanted.get(cli.name, ()):
                    self.futures[(cli.name, case.name)] = self._submit(case, cli)

    def _submit(self, case: h.Case, cli: h.Cli) -> Future[dict[str, Any]]:
        if cli.name != "lobster" or self.verified is None:
            return self.pool.submit(h.run_case, case, cli)
        recorded = self.verified / f"{case.name.replace('/', '__')}.json"
        if recorded.exists():
            done: Future[dict[str, Any]] = Future()
            done.set_result(json.loads(recorded.read_text(encoding="utf-8")))
            return done

        def run_and_record() -> dict[str, Any]:
            got = h.run_case(case, cli)
            recorded.parent.mkdir(parents=True, exist_ok=True)
            tmp = recorded.with_suffix(f".{os.getpid()}.tmp")
            tmp.write_text(json.dumps(got), encoding="utf-8")
            os.replace(tmp, recorded)  # whole or absent, even with two runs at once
            return got

        return self.pool.submit(run_and_record)

    def get(self, cli: str, name: str) -> dict[str, Any]:
        return self.futures[(cli, name)].result()

    def close(self) -> None:
        for f in self.futures.values():
            f.cancel()
        self.pool.shutdown(wait=True)


@pytest.fixture(scope="module")
def runs(request: pytest.FixtureRequest):
    # only the runs the selected tests need (so `-k name` runs one case, not the corpus)
    wanted: dict[str, set[str]] = {"lobster": set(), "clawtower": set()}
    for item in request.session.items:
        params = getattr(getattr(item, "callspec", None), "params", {})
        name = getattr(item, "originalname", "")
        if "name" in params and name == "test_lobster_still_matches_golden":
            wanted["lobster"].add(params["name"])
        elif "name" in params and name == "test_clawtower_matches":
            wanted["clawtower"].add(params["name"])
    r = Runs(wanted)
    yield r
    r.close()


def _explain(name: str, expected: list[dict[str, Any]], got: list[dict[str, Any]]) -> str:
    for i, (e, g) in enumerate(zip(expected, got, strict=False)):
        if e != g:
            return (f"{name}: call {i + 1} ({e.get('call')}) differs\n"
                    f"expected: {json.dumps(e, indent=1, ensure_ascii=False)}\n"
                    f"got:      {json.dumps(g, indent=1, ensure_ascii=False)}")
    return (f"{name}: {len(expected)} calls expected, {len(got)} made\n"
            f"expected: {json.dumps(expected, indent=1, ensure_ascii=False)}\n"
            f"got:      {json.dumps(got, indent=1, ensure_ascii=False)}")


def _skip_unavailable(case: h.Case) -> None:
    why = h.case_unavailable(case)
    if why:
        print(f"skip {case.name}: {why}")
        pytest.skip(why)


# ----------------------------------------------------------------------------- the corpus


def test_corpus_covers_the_brief() -> None:
    files = [p for p in h.CORPUS.rglob("*") if p.suffix in h.WORKFLOW_EXTS
             and not p.name.endswith(".case.yaml")]
    assert len(files) >= 45, f"only {len(files)} workflow files"
    exts = {p.suffix for p in files}
    assert exts >= {".lobster", ".yaml", ".yml", ".json"}, exts
    for case in CASES:
        assert h.load_expected(case.name) is not None, (
            f"{case.name} has no golden: run tests/workflows/record.py {case.name}")
    names = set(NAMES)
    for name in DEVIATIONS:
        assert name in names, f"deviations.yaml names an unknown case {name!r}"
        assert h.load_expected(name, clawtower=True) is not None, (
            f"deviation {name} has no tests/workflows/expected-clawtower/{name}.json"
            f" (record it: tests/workflows/record.py --clawtower {name})")


# ----------------------------------------------------------------------------- (a) Lobster


@pytest.mark.parametrize("name", NAMES)
def test_lobster_still_matches_golden(runs: Runs, name: str) -> None:
    if LOBSTER_MISSING:
        print(f"skip: {LOBSTER_MISSING}")
        pytest.skip(LOBSTER_MISSING)
    case = BY_NAME[name]
    _skip_unavailable(case)
    golden = h.load_expected(name)
    assert golden is not None, f"no golden for {name}: run tests/workflows/record.py {name}"
    got = runs.get("lobster", name)
    expected = h.comparable(golden, with_stderr=True)
    actual = h.comparable(got, with_stderr=True)
    assert actual == expected, _explain(name, expected, actual)


# ----------------------------------------------------------------------------- (b) clawtower


@pytest.mark.parametrize("name", NAMES)
def test_clawtower_matches(runs: Runs, name: str) -> None:
    case = BY_NAME[name]
    _skip_unavailable(case)
    deviation = DEVIATIONS.get(name)
    golden = h.load_expected(name, clawtower=deviation is not None)
    assert golden is not None, (
        f"no expected result for {name}"
        + (" in expected-clawtower/ (a documented deviation)" if deviation else ""))
    got = runs.get("clawtower", name)
    expected = h.comparable(golden, with_stderr=case.compare_stderr)
    actual = h.comparable(got, with_stderr=case.compare_stderr)
    why = f" [deliberate deviation: {deviation}]" if deviation else ""
    assert actual == expected, _explain(name, expected, actual) + why
