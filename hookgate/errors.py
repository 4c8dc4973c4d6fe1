"""The project's exceptions: one base, and the lease error every role shares.

Each concept keeps its errors in its own module; every one derives from :class:`HookgateError`::

    HookgateError
     ├── LeaseLost              a lease token is no longer the current one (a task, a delivery, a scheduler
     │                          execution): another holder swept or took the work over; our writes are void
     │    └── TaskCancelled     the task was cancelled while this lease held it (its run cancelled, its
     │                          issue closed, its deadline passed): stop working on it
     ├── ConfigError            a setting is wrong or the database is unreachable at start (hookgate.settings)
     ├── MigrationError         a migration or SQL function file cannot be applied (hookgate.migrations)
     ├── EmbeddedPostgresError  the embedded PostgreSQL cannot start (hookgate.embedded)
     ├── MissingRow             a statement that must return a row returned none (hookgate.database)
     ├── DecryptError           a stored secret does not decrypt with any key (hookgate.crypto)
     ├── EgressRefused          an agent address outbound calls may not reach (hookgate.egress)
     ├── AdmissionError, DispatchError, IssueNotFound   (autopilot.*)
     ├── Refused                a change the current state refuses, with a ``code`` saying why
     │    └── EditError, MemberError, NotReplayable, RetryRefused   (autopilot.*)
     ├── TaskError              (autopilot.tasks)
     │    └── TaskNotFound
     ├── SchedulerError         (scheduler.spec)
     │    └── InvalidJobSpec
     ├── InvalidSchedule        a cron expression or time zone that cannot work (scheduler.cron)
     └── ApiError               an HTTP error answered as {"error", "message"} (gateway.errors)

Database failures stay asyncpg's exceptions and are classified by SQLSTATE in one place,
:mod:`hookgate.database`: ``DATABASE_ERRORS`` (anything talking to the database can raise),
``is_unavailable`` (the database cannot serve now) and ``is_retryable`` (a lost conflict: run it again).
"""

from __future__ import annotations


class HookgateError(Exception):
    """Base of every Hookgate exception."""


class LeaseLost(HookgateError):
    """The caller's lease is stale or foreign: another holder swept or took the work; nothing was changed."""


class TaskCancelled(LeaseLost):
    """The task was cancelled while the caller's lease held it: the work should stop; nothing was changed."""


class Refused(HookgateError):
    """A change the current state refuses; ``code`` says why in one word (the API answers it as ``error``)."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
