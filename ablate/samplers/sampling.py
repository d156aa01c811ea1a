"""Drawing the next token of HFSampler's rows: one temperature per row, top-p, the
drawn ids' logprobs (ablate.samplers.base describes which distribution they are of)."""
from __future__ import annotations

import torch


def sample_rows(logits: torch.Tensor, temps: list[float], top_p: float,
                 gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """`sample` with one temperature per row: each group of rows sharing a temperature is
    drawn as one batch, in row order, so a group's random draws are those of a call with
    that group alone (greedy rows draw nothing)."""
    if len(set(temps)) == 1:
        return sample(logits, temps[0], top_p, gen)
    toks = torch.empty(len(temps), dtype=torch.long, device=logits.device)
    lps = torch.empty(len(temps), dtype=logits.dtype, device=logits.device)
    for t in sorted(set(temps), key=lambda t: t > 0):   # greedy first: no draws
        idx = torch.tensor([r for r, x in enumerate(temps) if x == t], device=logits.device)
        toks[idx], lps[idx] = sample(logits[idx], t, top_p, gen)
    return toks, lps


def sample(logits: torch.Tensor, temperature: float, top_p: float,
            gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """Sampled ids and their logprobs under softmax(logits / T) (T = 1 when greedy), on
    the logits' device with `gen` made for it (a CUDA generator draws other numbers than
    the CPU's for the same seed: a cell is reproducible per device type)."""
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
