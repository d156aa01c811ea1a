"""The answer judge's keys (`judge=`): `exact` or an OpenAI-compatible `llm` judge, read by
the email world (ablate/envs/email/judge.py)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional


@dataclass
class JudgeConfig:
    name: str = "exact"                  # exact | llm
    base_url: Optional[str] = None       # any OpenAI-compatible endpoint (llm)
    model: Optional[str] = None          # judge model name at that endpoint
    api_key_env: str = "OPENAI_API_KEY"  # the key is read from this environment variable
    timeout_s: float = 30.0              # per request, seconds (> 0)
    max_retries: int = 3                 # retries after a failed request (0 = none)
    cache_dir: str = "${env.cache_dir}/judge"   # verdicts cached here (failures are not)
