"""Consensus meetings: a coordinator, deterministic stances, rolling summaries, minutes."""
