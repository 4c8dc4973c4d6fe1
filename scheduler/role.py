"""The services ``hookgate scheduler`` runs (and ``serve`` includes)."""

from __future__ import annotations

from datetime import timedelta

from hookgate.context import Context
from hookgate.service import Service
from hookgate.settings import Settings
from scheduler import maintenance
from scheduler.clock import DatabaseClock
from scheduler.jobs import autopilot_schedule_job
from scheduler.manager import Scheduler, SchedulerConfig
from scheduler.spec import JobSpec


def default_jobs(settings: Settings) -> list[JobSpec]:
    """Every job the scheduler runs: autopilot schedules (a batch per statement) and the maintenance jobs."""
    schedules = autopilot_schedule_job(settings.scheduler_claim_batch, heartbeat_timeout_s=settings.heartbeat_timeout_s)
    return [schedules, *maintenance.jobs(settings)]


def scheduler_for(ctx: Context, jobs: list[JobSpec] | None = None) -> Scheduler:
    """The scheduler service over the context's pool, configured from settings."""
    s = ctx.settings
    clock = DatabaseClock(ctx.pool, offset=timedelta(seconds=s.scheduler_clock_offset_s))
    config = SchedulerConfig(dsn=ctx.direct_dsn, max_tick=s.scheduler_max_tick_s, concurrency=s.scheduler_concurrency,
                             claim_batch=s.scheduler_claim_batch, clock=clock)
    return Scheduler(ctx.pool, jobs if jobs is not None else default_jobs(s), config)


def services(ctx: Context) -> list[Service]:
    """The scheduler role's services: the DB-backed scheduler with its jobs."""
    return [scheduler_for(ctx)]
