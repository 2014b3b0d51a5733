"""One module per console mode (tasks, approvals, meetings, sessions, workflows), the task
drill-down, and what they share (`base`). Screens reach the app only through
`tui.protocol.ConsoleApp`; they never import `tui.app`."""
