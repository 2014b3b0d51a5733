"""clawtower's core: the engine, the store, the task protocol. Never imports the console.

The public API is small and re-exported here; fronts (CLI, console, servers, tests) use it.
"""

from .agents.provider import ChatMessage, ChatRequest, ChatResult, Provider, ProviderError
from .agents.registry import AgentSet
from .agents.simulator import SimScript, Simulator, load_script
from .approvals import Approvals
from .clock import FakeClock, SystemClock
from .effects import JournalSink, MemorySink
from .engine import Engine
from .errors import (
    ClawError,
    Conflict,
    IllegalTransition,
    NotFound,
    PermissionDenied,
    StoreError,
    ValidationError,
)
from .events import NewEvent, StoredEvent
from .meetings.coordinator import MeetingConfig, MeetingOutcome
from .meetings.service import Meetings, start_meeting
from .orchestrator import Orchestrator
from .store import SQLiteStore, Store, open_store
from .tasks.permissions import Role
from .tasks.phases import Phase
from .tasks.service import Tasks
from .tasks.spec import TaskSpec, load_spec
from .workflows.service import Workflows

__all__ = [
    "AgentSet", "Approvals", "ChatMessage", "ChatRequest", "ChatResult", "ClawError", "Conflict",
    "Engine", "FakeClock", "IllegalTransition", "JournalSink", "MeetingConfig", "MeetingOutcome",
    "Meetings", "MemorySink", "NewEvent",
    "NotFound", "Orchestrator", "PermissionDenied", "Phase", "Provider", "ProviderError", "Role",
    "SQLiteStore", "SimScript", "Simulator", "Store", "StoreError", "StoredEvent", "SystemClock",
    "TaskSpec", "Tasks", "ValidationError", "Workflows", "load_script", "load_spec",
    "open_store", "start_meeting",
]
