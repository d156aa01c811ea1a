"""What an email episode did, read from its tool results (used by the environment's
behaviour columns and by its reward schemes)."""
from __future__ import annotations

from ablate.protocol.task import Task, ToolResult
from ablate.envs.email.data import Task as EmailTask


def emails_read(results: list[ToolResult]) -> set[str]:
    return {r.extra["read_id"] for r in results if r.extra.get("read_id")}


def evidence_read(task, results: list[ToolResult]) -> int:
    """Evidence emails of the task the episode read."""
    return len(set(email_task(task).message_ids) & emails_read(results))


def email_task(task) -> EmailTask:
    """The email record of a protocol Task (or the record itself)."""
    return task.payload if isinstance(task, Task) else task
