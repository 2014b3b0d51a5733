"""Mode 4: agent sessions (a placeholder until the sessions issue lands)."""

from __future__ import annotations

from ..commands import mode_help
from .base import PlaceholderScreen


class SessionsScreen(PlaceholderScreen):

    HELP = mode_help(
        "**Sessions** arrive with a later issue.",
        ())
    MODE = "sessions"
    TEXT = ("Sessions — transcripts, subagents and steering — arrive with a later issue.\n\n"
            "Press 1 for tasks or 2 for approvals.")
