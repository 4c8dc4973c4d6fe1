"""The autopilot domain shared by every role: admission, runs, tasks, audit, rule versions."""
