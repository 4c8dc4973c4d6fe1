"""The services ``hookgate scheduler`` runs (and ``serve`` includes)."""

from __future__ import annotations

from datetime import timedelta

from hookgate.context import Context
from hookgate.service import Service
from hookgate.settings import Settings
from scheduler.jobs import autopilot_schedule_job, maintenance
from scheduler.maintenance import auto_pause_job, retention_job
from scheduler.manager import Scheduler
from scheduler.spec import JobSpec
from worker import watchdog


def default_jobs(settings: Settings) -> list[JobSpec]:
    """Every job the scheduler runs. A maintenance job is one line: ``maintenance(name, every, work)``."""
    return [
        autopilot_schedule_job(heartbeat_timeout_s=settings.heartbeat_timeout_s),
        retention_job(timedelta(days=settings.retention_age_days), settings.retention_batch_size),
        auto_pause_job(),
        maintenance("lease_watchdog", timedelta(seconds=60), watchdog.sweep_job(settings.heartbeat_timeout_s)),
    ]


def scheduler_for(ctx: Context, jobs: list[JobSpec] | None = None) -> Scheduler:
    """The scheduler service over the context's pool, configured from settings."""
    s = ctx.settings
    return Scheduler(
        ctx.pool, jobs if jobs is not None else default_jobs(s), dsn=ctx.dsn, max_tick=s.scheduler_max_tick_s,
        concurrency=s.scheduler_concurrency, claim_batch=s.scheduler_claim_batch,
        clock_offset=s.scheduler_clock_offset_s,
    )


def services(ctx: Context) -> list[Service]:
    """The scheduler role's services: the DB-backed scheduler with its jobs."""
    return [scheduler_for(ctx)]
