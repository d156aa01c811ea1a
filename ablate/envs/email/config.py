"""Typed configuration of the environment (`env=`) and the answer judge (`judge=`)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional


@dataclass
class EnvConfig:
    name: str = "synthetic"              # a registered environment (ablate.envs.env_names())
    _target_: Optional[str] = None       # a user's Environment class, `my_module.MyEnv`
    options: dict[str, Any] = field(default_factory=dict)   # more constructor arguments
    max_turns: int = 10                  # tool-calling turns before the episode is cut
    max_results: int = 10                # search hits returned (ART-E: 10)
    max_read_chars: int = 20000          # read_email shows at most this much body (then a note)
    cache_dir: str = "${oc.env:ABLATE_CACHE,'~/.cache/ablate'}"  # expanded with os.path.expanduser
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


@dataclass
class JudgeConfig:
    name: str = "exact"                  # exact | llm
    base_url: Optional[str] = None       # any OpenAI-compatible endpoint (llm)
    model: Optional[str] = None          # judge model name at that endpoint
    api_key_env: str = "OPENAI_API_KEY"  # the key is read from this environment variable
    timeout_s: float = 30.0              # per request, seconds (> 0)
    max_retries: int = 3                 # retries after a failed request (0 = none)
    cache_dir: str = "${env.cache_dir}/judge"   # verdicts cached here (failures are not)
