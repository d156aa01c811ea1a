"""A user's sampler backend written outside the ablate package: HF generate with a hard
cap on the tokens of each completion and a log of its calls. It declares everything a
backend declares where it registers: its own keys (CappedSamplerConfig), its check, its
capabilities and its memory-plan terms (docs/architecture.md, "Where to add").

    PYTHONPATH=tests python -m ablate plugins=[samplers_external.capped] sampler=capped \\
        sampler.max_new_tokens_cap=8 sampler.log_path=/tmp/calls.jsonl
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Optional

from ablate.core.errors import need
from ablate.core.plan import Term, model_bytes
from ablate.samplers import SAMPLERS
from ablate.samplers.config import SamplerConfig, check_sampler
from ablate.samplers.hf import HFSampler
from ablate.samplers.memory import step_tokens


@dataclass
class CappedSamplerConfig(SamplerConfig):
    max_new_tokens_cap: int = 16         # no completion is longer than this
    log_path: Optional[str] = None       # one JSON line per generate call


class CappedSampler(HFSampler):
    def __init__(self, model, tokenizer, *, device: str, cap: int, log_path: Optional[str]):
        super().__init__(model, tokenizer, device=device)
        self.cap, self.log_path = cap, log_path

    def generate(self, prompts, *, max_new_tokens, **kw):
        limits = [max_new_tokens] * len(prompts) if isinstance(max_new_tokens, int) \
            else list(max_new_tokens)
        capped = [min(int(m), self.cap) for m in limits]
        out = super().generate(prompts, max_new_tokens=capped, **kw)
        if self.log_path:
            with open(self.log_path, "a", encoding="utf-8") as fh:
                fh.write(json.dumps({"prompts": len(prompts), "cap": self.cap,
                                     "longest": max((len(c.ids) for c in out),
                                                    default=0)}) + "\n")
        return out


def check_capped(cfg) -> None:
    check_sampler(cfg)
    need(cfg.sampler.max_new_tokens_cap >= 1, "sampler.max_new_tokens_cap",
         cfg.sampler.max_new_tokens_cap, "must be >= 1")


def capped_terms(cfg, shape, ctx):
    """Its HF copy and a KV cache of the capped tokens only."""
    episodes, _ = step_tokens(cfg, ctx.world)
    turns = int(cfg.env.max_turns)
    tokens = episodes * min(int(cfg.harness.max_tokens_per_episode),
                            turns * int(cfg.sampler.max_new_tokens_cap))
    return [Term("sampler weights", shape.params * model_bytes(cfg), "resident", "HF copy"),
            Term("capped kv cache", tokens * shape.kv_bytes_per_token(model_bytes(cfg)),
                 "rollout", f"{episodes} episodes x {turns} turns x cap")], []


@SAMPLERS.register("capped", schema=CappedSamplerConfig, check=check_capped,
                   memory=capped_terms, capabilities=("in_process",))
def capped(sampler_cfg, model, tokenizer, *, device, dtype, seed):
    """HF generate, each completion capped at sampler.max_new_tokens_cap tokens."""
    return CappedSampler(model, tokenizer, device=device, cap=sampler_cfg.max_new_tokens_cap,
                         log_path=sampler_cfg.log_path)
