"""The batched pack's joint update (hydra/launcher=pack hydra.launcher.exact=false,
docs/packs.md): the updates of the cells that wait at the same time run together over
the pack's one base, each micro-batch index as ONE forward and ONE backward of every
cell's rows, each row through its own cell's adapter (ablate.core.lora_rows.model_rows:
the base matmul once, each row's LoRA delta from its cell's own parameters). Each cell's
loss is computed from its own rows by its own loss function with its own counts, and the
summed loss is backpropagated once: a cell's loss depends on its adapter alone, so each
adapter receives exactly its own loss's gradient (d(sum_j L_j)/d theta_k = dL_k/d theta_k).
Clipping, the optimizer step and the schedule stay each cell's own (Learner.update).

The shared prefix (ablate/learners/prefix.py) is kept: the cells' prefixes, cut to the
shortest of them, are forwarded as one batch of rows (each cell's own tokens through its
own adapter) and each micro-batch's rows run on top of their cell's prefix. A cell's
numbers are therefore its solo numbers up to float rounding (padding to the longest row
of the joint micro-batch, a shorter prefix), not bit for bit: hydra.launcher.exact=true
is the bit-exact mode.

A cell's `update` hands its plan to the UpdateEngine and waits
(ablate.core.turns.wait_for); the pack's scheduler serves when every live cell waits.
A request served alone (no scheduler, or no other cell waiting) is the cell's own
update (Learner._accumulate), bit for bit."""
from __future__ import annotations

import contextlib
import logging
from dataclasses import dataclass, field
from typing import Any

import torch

from ablate.core.lora_rows import model_rows
from ablate.core.turns import wait_for
from ablate.learners.base import LossInputs
from ablate.learners.batching import PAD_ID, MicroBatch
from ablate.learners.prefix import stacked

log = logging.getLogger("ablate.learners")
_ENGINE: list = []          # the UpdateEngine inside joint_updates()


@dataclass
class Request:
    learner: Any
    plan: Any                       # base._Plan
    adv: torch.Tensor
    loss_fn: Any
    counts: tuple[int, int]         # the batch's masked tokens and sequences
    result: tuple | None = None     # (summed loss, [(metrics, tokens)] per micro-batch)
    done: bool = False
    error: BaseException | None = field(default=None, repr=False)


def joint_reason(learner) -> str | None:
    """Why a learner cannot take part in a joint update (None: it can)."""
    if not learner.plain_backward or learner.world_size != 1:
        return "its backward is not plain autograd on one process"
    if not hasattr(learner.model, "peft_config"):
        return "it trains no LoRA adapter"
    if getattr(learner.cfg, "activation_checkpointing", False):
        return "activation checkpointing would recompute a forward outside the joint pass"
    return None


class UpdateEngine:
    """The joint updates of a batched pack and the requests waiting for them."""

    def __init__(self):
        self.pending: list[Request] = []
        self.updates = 0            # the cells' updates served (the pack's log)
        self.passes = 0             # joint updates run, of several cells each
        self.forwards = 0           # their micro-batch forward+backward passes

    def attach(self, learner) -> None:
        why = joint_reason(learner)
        if why is not None:
            log.info("this cell updates alone in its pack: %s", why)
            return
        learner.joint = self

    def run(self, learner, plan, adv, loss_fn, counts) -> tuple[float, list]:
        req = Request(learner, plan, adv, loss_fn, counts)
        self.pending.append(req)
        wait_for(lambda: req.done, self.serve)
        if req.error is not None:
            raise req.error
        return req.result

    def serve(self) -> None:
        """Every waiting update, in groups that can share a forward (same temperature,
        autocast dtype and output-head mode)."""
        pending, self.pending = self.pending, []
        groups: dict[tuple, list[Request]] = {}
        for r in pending:
            ln = r.learner
            key = (ln.temperature, str(ln.cfg.dtype), ln.head_on_trained_only)
            groups.setdefault(key, []).append(r)
        for reqs in groups.values():
            self._serve_safely(reqs)

    def _serve_safely(self, reqs: list[Request]) -> None:
        """One joint update; if it raises, each cell's again alone (its gradients reset
        first), so only the cell that raises fails. A cell alone runs its own update."""
        try:
            if len(reqs) == 1:
                r = reqs[0]
                r.result = r.learner._accumulate(r.plan, r.adv, r.loss_fn, *r.counts)
                r.done, self.updates = True, self.updates + 1
            else:
                self._joint(reqs)
        except Exception as exc:           # noqa: BLE001 - its cell raises it
            for r in reqs:
                r.learner.optimizer.zero_grad(set_to_none=True)
            if len(reqs) == 1:
                reqs[0].error, reqs[0].done = exc, True
                return
            for r in reqs:
                self._serve_safely([r])
        except BaseException as exc:       # an interrupt: no waiting cell waits on
            for r in reqs:
                r.error, r.done = exc, True
            raise

    def _joint(self, reqs: list[Request]) -> None:
        """The requests' gradients, each forward within the lead learner's
        micro_batch_tokens (the budget a solo forward keeps: `chunks`)."""
        P, n = min(len(r.plan.prefix) for r in reqs), len(reqs)
        budget = int(reqs[0].learner.cfg.micro_batch_tokens)
        pres, refs = [None] * n, [None] * n
        for part in chunks([(1, P)] * n, budget) if P else []:
            got = self._prefixes([reqs[j] for j in part], P)
            for j, pre, ref in zip(part, *got):
                pres[j], refs[j] = pre, ref
        totals, parts = [0.0] * n, [[] for _ in reqs]
        for k in range(max(len(r.plan.mbs) for r in reqs)):
            live = [j for j, r in enumerate(reqs) if k < len(r.plan.mbs)]
            shapes = [(reqs[j].plan.mbs[k].ids.shape[0], reqs[j].plan.mbs[k].ids.shape[1] - P)
                      for j in live]
            for part in chunks(shapes, budget):
                js = [live[i] for i in part]
                losses = self._micro([reqs[j] for j in js], k, [pres[j] for j in js],
                                     [refs[j] for j in js])
                _backward(losses)
                self.forwards += 1
                for j, (loss, metrics, tokens) in zip(js, losses):
                    totals[j] += float(loss.detach())
                    parts[j].append((metrics, tokens))
        if P:
            _backward([(p.vjp_loss(),) for p in pres])
        self.passes, self.updates = self.passes + 1, self.updates + n
        for j, r in enumerate(reqs):
            r.plan.prefix = r.plan.prefix[:P]   # what the update forwarded once
            r.result, r.done = (totals[j], parts[j]), True

    def _prefixes(self, reqs: list[Request], P: int) -> tuple[list, list]:
        """Each cell's first P prefix tokens through its own adapter, one forward: per
        cell a Prefix of detached leaves, and its reference's (None without one)."""
        lead = reqs[0].learner
        rows = [list(r.plan.prefix[:P]) for r in reqs]
        with model_rows([r.learner.model for r in reqs], list(range(len(reqs)))):
            both = lead._prefix(rows, trained_only=lead.head_on_trained_only)
        refs = []
        for j, r in enumerate(reqs):
            with torch.no_grad():
                refs.append(r.learner._prefix(rows[j], ref=True, entropy=False,
                                              trained_only=lead.head_on_trained_only)
                            if r.learner._has_ref() else None)
        return [both.row(j).leaves() for j in range(len(reqs))], refs

    def _micro(self, reqs, k, pres, refs) -> list[tuple]:
        """Micro-batch k of each request: one forward of all their rows; per request
        (loss, metrics, masked tokens) from its own rows."""
        lead = reqs[0].learner
        only = lead.head_on_trained_only
        mbs = [r.plan.mbs[k] for r in reqs]
        sizes = [mb.ids.shape[0] for mb in mbs]
        pre = stacked(pres, sizes) if pres[0] is not None else None
        rows = [j for j, b in enumerate(sizes) for _ in range(b)]
        with model_rows([r.learner.model for r in reqs], rows):
            lp, ent = lead._stats(concat(mbs), pre, trained_only=only)
        out, at = [], 0
        for r, mb, ref_pre in zip(reqs, mbs, refs):
            b, T = mb.ids.shape
            ln = r.learner
            with torch.no_grad():
                ref = ln._stats(mb, ref_pre, ref=True, entropy=False,
                                trained_only=only)[0] \
                    if ln._has_ref() else None
            inputs = LossInputs(lp[at:at + b, :T], mb.old_logprobs, r.adv[mb.index],
                                mb.mask, ent[at:at + b, :T], ref, num_tokens=r.counts[0],
                                num_seqs=r.counts[1], index=mb.index)
            loss, metrics = r.loss_fn(inputs)
            out.append((loss, metrics, float(mb.mask.sum())))
            at += b
        return out


def chunks(shapes: list[tuple[int, int]], budget: int) -> list[list[int]]:
    """Consecutive groups of the items (rows, tokens per row) whose rows x longest row
    stays within `budget`, one forward's tokens (learner.micro_batch_tokens, which a solo
    update's micro-batches keep: batching.pack); an item over it alone."""
    out: list[list[int]] = []
    rows = longest = 0
    for i, (b, t) in enumerate(shapes):
        if out and (rows + b) * max(longest, t) <= budget:
            out[-1].append(i)
            rows, longest = rows + b, max(longest, t)
        else:
            out.append([i])
            rows, longest = b, t
    return out


def _backward(losses: list[tuple]) -> None:
    """One backward of the summed losses (each reaches its own cell's adapter only)."""
    live = [x[0] for x in losses if x[0].requires_grad]
    if live:
        torch.stack([x.float() for x in live]).sum().backward()


def concat(mbs: list[MicroBatch]) -> MicroBatch:
    """The micro-batches' rows as one, right-padded to the longest (index: row order)."""
    T = max(mb.ids.shape[1] for mb in mbs)

    def pad(t, value):
        return torch.nn.functional.pad(t, (0, T - t.shape[1]), value=value)
    return MicroBatch(list(range(sum(mb.ids.shape[0] for mb in mbs))),
                      torch.cat([pad(mb.ids, PAD_ID) for mb in mbs]),
                      torch.cat([pad(mb.mask, 0.0) for mb in mbs]),
                      torch.cat([pad(mb.old_logprobs, 0.0) for mb in mbs]),
                      [n for mb in mbs for n in mb.lengths],
                      [a for mb in mbs for a in mb.allowed])


@contextlib.contextmanager
def joint_updates():
    """Inside: make_learner hands each LoRA torch learner to one UpdateEngine."""
    _ENGINE.append(UpdateEngine())
    try:
        yield _ENGINE[-1]
    finally:
        _ENGINE.pop()


def engine() -> UpdateEngine | None:
    return _ENGINE[-1] if _ENGINE else None
