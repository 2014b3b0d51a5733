"""The durable store: an append-only event log plus projections derived from it."""

from .interface import Command, Store, WriteTx
from .open import open_store
from .sqlite import SQLiteStore

__all__ = ["Command", "SQLiteStore", "Store", "WriteTx", "open_store"]

# Meeting events and their projections register themselves on import: any process that
# opens a store can decode and replay them. Expert events (core/experts/events.py, no
# projection tables) register the same way.
from ..acp import projections as _acp_projections  # noqa: F401
from ..experts import events as _expert_events  # noqa: F401
from ..flows import projections as _flow_projections  # noqa: F401
from ..meetings import projections as _meeting_projections  # noqa: F401
from ..memory import projections as _memory_projections  # noqa: F401
from ..sessions import projections as _session_projections  # noqa: F401
from ..triggers import projections as _trigger_projections  # noqa: F401
