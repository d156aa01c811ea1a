"""The output head on trained positions only.

A loss reads token logprobs (and entropies, reference logprobs) only where the mask is 1:
on the default cell that is ~2.7k of ~13k forwarded positions, while the head (hidden x
vocabulary) and the softmax over the vocabulary behind each logprob were a third of an
update's arithmetic. `head_rows` makes the model's own forward apply its output
projection to the hidden states of the selected positions only: a forward pre-hook on the
head module gathers those rows, so the rest of the forward (DeepSpeed ZeRO-3's parameter
gathers and gradient hooks, LoRA, the KV cache) is unchanged, and the gradient reaching
the hidden states is the same one the full head gives (zero at unselected positions).
tests/learners/test_learners.py checks losses and gradients against the full-head computation."""
from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Optional

import torch

from ablate.learners.batching import shifted_stats


@dataclass
class Selection:
    """Trained target positions (rows[k], cols[k]) of a [b, T] micro-batch, targets at or
    after `start` (those predicted by the forwarded suffix, which begins at `start - 1`)."""
    rows: torch.Tensor
    cols: torch.Tensor
    shape: tuple[int, int]
    start: int

    def __len__(self) -> int:
        return len(self.rows)

    def flat(self, width: int) -> torch.Tensor:
        """Row-major index of each target's predicting position in the forwarded input
        [b, width] (the input holds positions start-1 .. start-2+width of the rows)."""
        return self.rows * width + (self.cols - self.start)

    def stats(self, logits: torch.Tensor, ids: torch.Tensor, temperature: float,
              allowed: Optional[list], entropy: bool = True
              ) -> tuple[torch.Tensor, Optional[torch.Tensor]]:
        """[b, T] logprobs (and entropies) from the selected logits [N, V]; 0 elsewhere."""
        spec = self._allowed(allowed)
        lp, ent = shifted_stats(logits[None], ids[self.rows, self.cols][None], temperature,
                                [spec] if spec else None, 0, entropy)
        return self._scatter(lp[0]), (self._scatter(ent[0]) if entropy else None)

    def _scatter(self, v: torch.Tensor) -> torch.Tensor:
        return v.new_zeros(self.shape).index_put((self.rows, self.cols), v)

    def _allowed(self, allowed: Optional[list]) -> dict:
        """The action masks of the selected positions, keyed by their order k."""
        if not allowed or not any(allowed):
            return {}
        order = {rc: k for k, rc in enumerate(zip(self.rows.tolist(), self.cols.tolist()))}
        return {order[r, int(t)]: toks for r, a in enumerate(allowed) for t, toks in
                (a or {}).items() if (r, int(t)) in order}


def trained_positions(mask: torch.Tensor, prefix: int = 0) -> Selection:
    """Positions t >= max(prefix, 0) + 1 with mask 1 (position `prefix` itself is predicted by
    the shared prefix's last logits, see ablate/learners/prefix.py)."""
    start = prefix + 1
    rows, cols = torch.nonzero(mask[:, start:] > 0, as_tuple=True)
    return Selection(rows, cols + start, tuple(mask.shape), start)


@contextlib.contextmanager
def head_rows(head: torch.nn.Module, flat: torch.Tensor):
    """Within: `head` (the output projection) sees hidden states [1, N, H], the rows
    `flat` of its input [b, n, H] flattened row-major; the model's logits are [1, N, V]."""
    def gather(module, args):
        h = args[0]
        return (h.reshape(-1, h.shape[-1]).index_select(0, flat.to(h.device))[None],
                *args[1:])

    handle = head.register_forward_pre_hook(gather)
    try:
        yield
    finally:
        handle.remove()
