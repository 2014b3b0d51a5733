"""The seeding of `clawtower demo` (and of the console's tests and screenshots): sessions,
flows, an expert's webhook and an ACP turn stopped at its permission request, each brought
to the state the walk-through starts from.

A front end of the engine like `serve`: it runs its work on the engine every front end builds
(core/workers.py, `build_engine`, with the workers it needs), never on workers wired by hand,
so the protocols never import it.
"""
