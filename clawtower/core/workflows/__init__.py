"""Lobster-compatible workflows: files loaded and validated, runs driven step by step, every
step result and gate stored as events, resumable from any process."""
