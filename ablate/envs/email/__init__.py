"""The email task (EnronHop / synthetic mailbox): mailbox database, agent tools, answer
judges, records, and `EmailEnv`, its face on the environment protocol (env.py).
`ablate.envs.email` is an alias of this package."""
from ablate.envs.email.data import Email, Task, read_emails, read_tasks, write_jsonl
from ablate.envs.email.db import EmailDB, EmailDBError
from ablate.envs.email.judge import ExactJudge, JudgeError, LLMJudge, make_judge
from ablate.envs.email.tools import SYSTEM_PROMPT, TOOL_SCHEMAS, ToolBox, ToolCall
from ablate.envs.email.env import EmailEnv

__all__ = ["Email", "Task", "read_emails", "read_tasks", "write_jsonl", "EmailDB",
           "EmailDBError", "ToolBox", "ToolCall", "TOOL_SCHEMAS", "SYSTEM_PROMPT",
           "ExactJudge", "LLMJudge", "JudgeError", "make_judge", "EmailEnv"]
