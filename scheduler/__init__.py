"""Generic DB-backed scheduler and the jobs that use it (autopilot schedules, maintenance)."""
