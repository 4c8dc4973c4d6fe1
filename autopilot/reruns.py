"""Retry a run that ended ``failed`` or ``cancelled``: one more task for the same run, the run queued again.

The new task continues the run's task keys (``run:<run id>:<n>``, n = the run's tasks so far + 1), so a
retry is another attempt of the same run, never a new run. The run row is locked first: concurrent retries
of one run queue up, and the later one finds the run queued again (refused), so one retry makes one task.
The task goes to the agent the autopilot's assignee resolves to now (a squad: its leader); none, or an
archived one, refuses the retry. A create_issue run keeps its issue (made now if the run ended before it
had one); an issue that was cancelled (which is what cancelled the run) is opened again (``todo``).
The run's deadline (``run_timeout_s``) counts again from the retry.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from uuid import UUID

from autopilot import audit, dispatch
from hookgate import notify
from hookgate.database import Conn
from hookgate.errors import Refused
from sql import Q

#: The run statuses a retry accepts.
RETRYABLE = ("failed", "cancelled")


class RetryRefused(Refused):
    """The run cannot be retried now; ``code`` says why (``run_not_retryable``, ``agent_archived``, …)."""


@dataclass(frozen=True)
class Retried:
    """The run's new task and its attempt number (the run's n-th task)."""

    run_id: UUID
    task_id: UUID
    attempt: int


async def retry_run(conn: Conn, run_id: UUID, *, max_attempts: int, actor_id: UUID,
                    heartbeat_timeout_s: float) -> Retried:
    """Make the run's next task and queue the run again, in the caller's transaction; audited RETRY.

    The caller checked that the run exists in its workspace and that the actor may write its autopilot.
    Raises :class:`RetryRefused` when the run's status or its agent does not allow a retry.
    """
    run = await conn.fetchrow(Q.run_lock_for_dispatch, run_id, heartbeat_timeout_s)
    if run is None:
        raise dispatch.DispatchError(str(run_id))
    _check(run)
    attempt = int(await conn.fetchval(Q.task_count_for_run, run_id)) + 1
    issue_id, reopened = run["issue_id"], False
    if run["execution_mode"] == "create_issue":
        issue_id = await dispatch.ensure_issue(conn, run)
        reopened = await conn.fetchval(Q.issue_reopen, issue_id) is not None
    payload: Any = run["payload"]
    task_id: UUID | None = await conn.fetchval(
        Q.task_insert_for_run, run["workspace_id"], run_id, issue_id, run["agent_id"], payload, max_attempts,
        dispatch.task_key(run_id, attempt))
    if task_id is None:  # the key is taken although the run had attempt - 1 tasks: never by a retry
        raise RetryRefused("retry_conflict", f"attempt {attempt} of this run already has a task")
    await conn.execute(Q.run_requeue, run_id, task_id)
    await audit.record(conn, "RETRY", actor_type="member", actor_id=actor_id, subject_type="run",
                       subject_id=run_id, workspace_id=run["workspace_id"],
                       detail={"previous_status": run["status"], "task_id": str(task_id), "attempt": attempt,
                               "issue_reopened": reopened})
    await conn.execute(Q.notify_send, notify.TASKS, str(task_id))
    return Retried(run_id, task_id, attempt)


def _check(run: Any) -> None:
    """Refuse a run that has not ended failed/cancelled, or whose assignee resolves to no usable agent."""
    if run["status"] not in RETRYABLE:
        raise RetryRefused("run_not_retryable",
                           f"only a failed or cancelled run can be retried; this one is {run['status']}")
    if run["agent_id"] is None:
        raise RetryRefused("assignee_missing", "the assignee (agent or squad leader) does not exist")
    if run["agent_archived"]:
        raise RetryRefused("agent_archived", "the assigned agent is archived")
