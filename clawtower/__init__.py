"""clawtower: a multi-agent orchestration engine with an operator console in the terminal.

The one import root of the distribution: `clawtower.core` (the engine and the store, never
the console), `clawtower.cli` (the `clawtower` command), `clawtower.tui` (the console). The
files the product ships (themes, the demo, examples, the `init` project) are package data
here, found through `clawtower.core.assets` from a checkout and from a wheel alike. Importing
this package loads nothing else.
"""
