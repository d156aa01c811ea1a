"""Typed configuration of the environment (`env=`) and the answer judge (`judge=`)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional


@dataclass
class EnvConfig:
    name: str = "synthetic"              # synthetic | enronhop
    max_turns: int = 10                  # tool-calling turns before the episode is cut
    max_results: int = 10                # search hits returned (ART-E: 10)
    cache_dir: str = "${oc.env:ABLATE_CACHE,'~/.cache/ablate'}"  # expanded with os.path.expanduser
    # synthetic mailbox (deterministic from gen_seed)
    gen_seed: int = 0
    num_inboxes: int = 24
    emails_per_inbox: int = 120
    train_tasks: int = 400
    test_tasks: int = 200
    max_hops: int = 2
    # enronhop: the user's local JSONL files (fields: docs/data.md)
    emails_path: Optional[str] = None
    train_tasks_path: Optional[str] = None
    test_tasks_path: Optional[str] = None


@dataclass
class JudgeConfig:
    name: str = "exact"                  # exact | llm
    base_url: Optional[str] = None       # any OpenAI-compatible endpoint (llm)
    model: Optional[str] = None
    api_key_env: str = "OPENAI_API_KEY"  # the key is read from this environment variable
    timeout_s: float = 30.0
    max_retries: int = 3
    cache_dir: str = "${env.cache_dir}/judge"
