"""Shared fixtures for the core tests: a real store on a temp file, a fake clock, helpers."""

from __future__ import annotations

import os
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))
HELPERS = Path(__file__).resolve().parent / "helpers"
if str(HELPERS) not in sys.path:
    sys.path.insert(0, str(HELPERS))

# PostgreSQL replicas kept between opens (core/store/replica.py) go to a folder of this run,
# never the user's home; child processes (and xdist workers) inherit it
_RUN_FOLDERS: list[str] = []
if "CLAWTOWER_REPLICA_DIR" not in os.environ:
    _RUN_FOLDERS.append(tempfile.mkdtemp(prefix="clawtower-replicas-"))
    os.environ["CLAWTOWER_REPLICA_DIR"] = _RUN_FOLDERS[0]

from clawtower.core.clock import FakeClock  # noqa: E402
from clawtower.core.store import open_store  # noqa: E402
from clawtower.core.tasks.service import Tasks  # noqa: E402


def pytest_configure(config: pytest.Config) -> None:
    """Every server this pytest process starts dies with it, even on SIGKILL: see
    tests/helpers/reaper.py (each xdist worker starts its own)."""
    import reaper

    reaper.start(*_RUN_FOLDERS)


# Opt-in marks: a test so marked runs only when asked (its --run-X option, CLAWTOWER_RUN_X=1,
# or a -m expression naming the mark); otherwise it is skipped with that reason.
OPT_IN = {
    "slow": "the full-size durability figures",
    "openclaw": "a real OpenClaw Gateway and its own llama.cpp server, ~2 min on one worker;"
                " CI runs them in a step of their own (.ci/run)",
    "phoenix": "a real Arize Phoenix server (~20 s to start); CI runs it in a step of its own"
               " (.ci/run)",
}


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """`-n auto` (the README's test command): two workers per core up to 8, then one per
    core. Most tests wait on subprocesses, servers and the store rather than compute: on a
    2-core machine 4 workers ran tests/cli in 104 s against 121 s with 2, and the suite is
    meant to pass beside a second suite (README, Testing)."""
    cores = os.cpu_count() or 1
    return max(cores, min(2 * cores, 8))


def pytest_addoption(parser: pytest.Parser) -> None:
    for mark, what in OPT_IN.items():
        parser.addoption(f"--run-{mark}", action="store_true", default=False,
                         help=f"also run tests marked {mark} ({what})")


@pytest.hookimpl(tryfirst=True)  # before xdist's, which reads the xdist_group marks
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Tests using the llama.cpp server run on one xdist worker, so it starts once.

    Tests marked slow or openclaw run only when asked (OPT_IN). The default run covers each
    requirement at a smaller scale, within the README's time budget."""
    for item in items:
        if "llama" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.xdist_group("llama"))
    markexpr = config.getoption("-m") or ""
    for mark in OPT_IN:
        if config.getoption(f"--run-{mark}") \
                or os.environ.get(f"CLAWTOWER_RUN_{mark.upper()}") == "1" or mark in markexpr:
            continue
        skip = pytest.mark.skip(reason=f"{mark}: run with --run-{mark} or -m {mark}")
        for item in items:
            if mark in item.keywords:
                item.add_marker(skip)


@pytest.fixture(scope="session")
def llama() -> Iterator[str]:
    """The real llama.cpp server with SmolLM2 (tests/helpers/llama_peer.py), one for the
    session: its base URL (…/v1); the test skips with the reason when the peer is missing."""
    from llama_peer import llama_server

    with llama_server() as base:
        yield base


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "store.db"


#: Test modules whose store-fixture tests run on both backends besides the store contract
#: (tests marked `both_backends`): a bounded set of task, workflow and meeting tests, so the
#: PostgreSQL half keeps CI short. CLAWTOWER_TEST_BACKENDS=both runs all of them.
BOTH_BACKEND_MODULES = {
    "test_core_recovery", "test_core_permissions", "test_workflows_runner",
    "test_workflows_gates", "test_meetings_service",
}


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Tests marked `both_backends` that open a store run once per backend: the one
    contract suite (SQLite, and PostgreSQL from tests/helpers/pg.py). With
    CLAWTOWER_TEST_BACKENDS=both every test that takes the `store` fixture does."""
    everywhere = os.environ.get("CLAWTOWER_TEST_BACKENDS") == "both"  # the long, full run
    if "store_backend" in metafunc.fixturenames and (
            everywhere or metafunc.definition.get_closest_marker("both_backends")
            or metafunc.module.__name__.rsplit(".", 1)[-1] in BOTH_BACKEND_MODULES):
        metafunc.parametrize("store_backend", ["sqlite", "postgres"], indirect=True)


@pytest.fixture
def store_backend(request: pytest.FixtureRequest) -> str:
    return str(getattr(request, "param", "sqlite"))


@pytest.fixture
def store_target(store_backend: str, db_path: Path, request: pytest.FixtureRequest) -> str:
    """Where this test's store lives: a file, or a fresh PostgreSQL database."""
    if store_backend == "postgres":
        return str(request.getfixturevalue("pg_url"))
    return str(db_path)


@pytest.fixture(scope="session")
def pg_server_url():
    from pg import server_url

    yield from server_url()


@pytest.fixture
def pg_url(pg_server_url: str):
    from pg import fresh_database

    yield from fresh_database(pg_server_url)


@pytest.fixture
async def store(store_target: str, clock: FakeClock):
    s = await open_store(store_target, clock=clock)
    try:
        yield s
    finally:
        await s.close()


@pytest.fixture
def tasks(store) -> Tasks:
    return Tasks(store)

