"""The EnronHop environment: mailbox database, agent tools, answer judges, records."""
from ablate.env.data import Email, Task, read_emails, read_tasks, write_jsonl
from ablate.env.db import EmailDB, EmailDBError
from ablate.env.judge import ExactJudge, JudgeError, LLMJudge, make_judge
from ablate.env.tools import TOOL_SCHEMAS, ToolBox

__all__ = ["Email", "Task", "read_emails", "read_tasks", "write_jsonl", "EmailDB",
           "EmailDBError", "ToolBox", "TOOL_SCHEMAS", "ExactJudge", "LLMJudge", "JudgeError",
           "make_judge"]
