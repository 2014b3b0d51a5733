"""Flows (seed 003, Clawflow): recursive task DAGs delegated between agents through
mailboxes. `service` holds the store commands and reads, `plan` validates decompositions,
`engine` schedules ready subtasks and runs agents, `render` writes the seed's file layout.
"""
