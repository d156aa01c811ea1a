"""The email task's own `env` keys (`env=synthetic|enronhop`), beside the common ones of
ablate.protocol.config.EnvConfig; the answer judge's schema is JudgeConfig (re-exported)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from ablate.envs.config import JudgeConfig  # noqa: F401  (re-exported)
from ablate.protocol.config import EnvConfig


@dataclass
class EmailEnvConfig(EnvConfig):
    max_results: int = 10                # search hits returned (ART-E: 10)
    max_read_chars: int = 20000          # read_email shows at most this much body (then a note)
    # synthetic mailbox (deterministic from gen_seed)
    gen_seed: int = 0                    # the same seed gives the same mailbox
    num_inboxes: int = 24                # inbox owners (train and test tasks use disjoint inboxes)
    emails_per_inbox: int = 120          # emails each inbox owner sends or receives
    train_tasks: int = 400               # questions generated for training
    test_tasks: int = 200                # held-out questions (eval.num_tasks of them are used)
    max_hops: int = 2                    # evidence emails chained per question (1..4)
    # enronhop: the user's local JSONL files (fields: docs/data.md)
    emails_path: Optional[str] = None    # emails JSONL
    train_tasks_path: Optional[str] = None   # train tasks JSONL
    test_tasks_path: Optional[str] = None    # test tasks JSONL
