"""Maintenance jobs on the shared scheduler, one module per job, each with its job spec and its work.

- :mod:`~scheduler.maintenance.leases` ``lease_watchdog`` (60 s): silent runtime instances offline, expired
  task leases back to the queue (or failed, with their run, when no attempt is left); one transaction.
- :mod:`~scheduler.maintenance.retention` ``retention`` (hourly): old raw delivery bodies dropped, old
  finished executions, sent or failed notifications and expired Idempotency-Keys deleted, in short batches.
- :mod:`~scheduler.maintenance.partitions` ``partitions`` (hourly): time partitions of deliveries, task attempts
  and the audit log created ahead, and those past retention detached and dropped whole.
- :mod:`~scheduler.maintenance.auto_pause` ``auto_pause`` (5 min): autopilots whose runs mostly fail paused.
- :mod:`~scheduler.maintenance.deadlines` ``run_deadlines`` (``HOOKGATE_DEADLINE_SWEEP_S``, 5 s): runs past
  their autopilot's ``run_timeout_s`` fail (deadline_exceeded) and their tasks are cancelled.
- :mod:`~scheduler.maintenance.rejection_spikes` ``rejection_spikes`` (1 min): ``trigger.rejections_spike``
  alerts for triggers with many rejected deliveries.
- :mod:`~scheduler.maintenance.periodic`: the shape they share (once per interval across all schedulers,
  latest-only) and :func:`~scheduler.maintenance.periodic.periodic_job` for a one-line job.

The package lives under ``scheduler`` because the scheduler is what runs these jobs, and the only other
user is the worker's own watchdog loop (``worker.watchdog``, for deployments without a scheduler), which
may import the scheduler; the scheduler never imports the worker, and nothing here imports the gateway.
"""

from __future__ import annotations

from datetime import timedelta

from hookgate.settings import Settings
from scheduler.maintenance import auto_pause, deadlines, leases, partitions, rejection_spikes, retention
from scheduler.spec import JobSpec


def jobs(settings: Settings) -> list[JobSpec]:
    """Every maintenance job, configured from settings."""
    direct = settings.direct_database_url.get_secret_value() if settings.direct_database_url else None
    return [
        retention.retention_job(timedelta(days=settings.retention_age_days), settings.retention_batch_size),
        partitions.partitions_job(partitions.retention_of(
            settings.delivery_retention_days, settings.retention_age_days, settings.audit_retention_days),
            direct_dsn=direct),
        auto_pause.auto_pause_job(),
        rejection_spikes.rejection_spikes_job(),
        leases.lease_watchdog_job(settings.heartbeat_timeout_s),
        deadlines.run_deadlines_job(timedelta(seconds=settings.deadline_sweep_s)),
    ]
