"""`python -m clawtower ...`: the `clawtower` command (the same as the installed script)."""

from clawtower.cli.main import main

raise SystemExit(main())
