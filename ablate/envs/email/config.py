"""The email task's own `env` keys (`env=synthetic|enronhop`), beside the common ones of
ablate.protocol.config.EnvConfig, its answer judge's (`env.judge.*`) among them."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from ablate.protocol.config import EnvConfig

JUDGES = ("exact", "llm")


@dataclass
class JudgeConfig:
    name: str = "exact"                  # exact | llm
    base_url: Optional[str] = None       # any OpenAI-compatible endpoint (llm)
    model: Optional[str] = None          # judge model name at that endpoint
    api_key_env: str = "OPENAI_API_KEY"  # the key is read from this environment variable
    timeout_s: float = 30.0              # per request, seconds (> 0)
    max_retries: int = 3                 # retries after a failed request (0 = none)
    cache_dir: str = "${env.cache_dir}/judge"   # verdicts cached here (failures are not)


@dataclass
class EmailEnvConfig(EnvConfig):
    max_results: int = 10                # search hits returned (ART-E: 10)
    max_read_chars: int = 20000          # read_email shows at most this much body (then a note)
    # the answer judge (ablate/envs/email/judge.py): exact (normalised match, offline) or
    # an OpenAI-compatible llm (env.judge.name=llm env.judge.base_url=... env.judge.model=...)
    judge: JudgeConfig = field(default_factory=JudgeConfig)
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
