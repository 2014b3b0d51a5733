"""clawtower's core: the engine, the store, the task protocol. Never imports the console.

The public API is small and re-exported here; fronts (CLI, console, servers, tests) use it.
The re-exports are lazy (PEP 562): `import clawtower.core` loads nothing else, and
`core.Engine` (or `from clawtower.core import Engine`) imports its submodule on first use. A
CLI command then pays only for the modules it needs (BENCHMARKS.md, start-up).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .agents.provider import ChatMessage, ChatRequest, ChatResult, Provider, ProviderError
    from .agents.registry import AgentSet
    from .agents.simulator import SimScript, Simulator, load_script
    from .approvals import Approvals
    from .clock import FakeClock, SystemClock
    from .effects import JournalSink, MemorySink
    from .engine import Engine
    from .errors import (
        AlreadyDecided,
        ClawError,
        Conflict,
        IllegalTransition,
        NotFound,
        PermissionDenied,
        StoreError,
        ValidationError,
    )
    from .events import NewEvent, StoredEvent
    from .meetings.config import MeetingConfig, MeetingOutcome
    from .meetings.service import Meetings, start_meeting
    from .orchestrator import Orchestrator
    from .store import SQLiteStore, Store, open_store
    from .tasks.permissions import Role
    from .tasks.phases import Phase
    from .tasks.service import Tasks
    from .tasks.spec import TaskSpec, load_spec
    from .workflows.service import Workflows

# public name -> the submodule (relative to this package) that defines it
_EXPORTS: dict[str, str] = {
    "ChatMessage": ".agents.provider", "ChatRequest": ".agents.provider",
    "ChatResult": ".agents.provider", "Provider": ".agents.provider",
    "ProviderError": ".agents.provider",
    "AgentSet": ".agents.registry",
    "SimScript": ".agents.simulator", "Simulator": ".agents.simulator",
    "load_script": ".agents.simulator",
    "Approvals": ".approvals",
    "FakeClock": ".clock", "SystemClock": ".clock",
    "JournalSink": ".effects", "MemorySink": ".effects",
    "Engine": ".engine",
    "AlreadyDecided": ".errors", "ClawError": ".errors", "Conflict": ".errors",
    "IllegalTransition": ".errors",
    "NotFound": ".errors", "PermissionDenied": ".errors", "StoreError": ".errors",
    "ValidationError": ".errors",
    "NewEvent": ".events", "StoredEvent": ".events",
    "MeetingConfig": ".meetings.coordinator", "MeetingOutcome": ".meetings.coordinator",
    "Meetings": ".meetings.service", "start_meeting": ".meetings.service",
    "Orchestrator": ".orchestrator",
    "SQLiteStore": ".store", "Store": ".store", "open_store": ".store",
    "Role": ".tasks.permissions",
    "Phase": ".tasks.phases",
    "Tasks": ".tasks.service",
    "TaskSpec": ".tasks.spec", "load_spec": ".tasks.spec",
    "Workflows": ".workflows.service",
}

__all__ = [
    "AgentSet", "AlreadyDecided", "Approvals", "ChatMessage", "ChatRequest", "ChatResult",
    "ClawError", "Conflict",
    "Engine", "FakeClock", "IllegalTransition", "JournalSink", "MeetingConfig", "MeetingOutcome",
    "Meetings", "MemorySink", "NewEvent",
    "NotFound", "Orchestrator", "PermissionDenied", "Phase", "Provider", "ProviderError", "Role",
    "SQLiteStore", "SimScript", "Simulator", "Store", "StoreError", "StoredEvent", "SystemClock",
    "TaskSpec", "Tasks", "ValidationError", "Workflows", "load_script", "load_spec",
    "open_store", "start_meeting",
]


if not TYPE_CHECKING:  # to mypy, core has exactly the names imported above

    def __getattr__(name: str) -> Any:
        """Import a public name's submodule on first use, and keep the name here."""
        module = _EXPORTS.get(name)
        if module is None:
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module, __name__), name)
        globals()[name] = value
        return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
