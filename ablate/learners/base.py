"""The learner interface and everything the torch and DeepSpeed learners share: one
optimizer step over a batch of segments (micro-batched gradient accumulation with global
loss normalisers, the segments' shared prefix forwarded once: ablate/learners/prefix.py),
token logprobs, atomic checkpoints, full-weight export.

A subclass supplies the engine-specific parts: forward, backward, step, gathered weights,
and the optimizer/engine state in a checkpoint."""
from __future__ import annotations

import functools
import hashlib
import inspect
import json
import logging
import os
import random
import re
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Optional, Sequence

import numpy as np
import torch

from ablate.core.errors import write_error
from ablate.learners.batching import (SUM_METRICS, MicroBatch, collate, combine_metrics,
                                      pack, token_stats)
from ablate.learners.head import head_rows, trained_positions
from ablate.learners.prefix import (Prefix, cache_tensors, expanded_cache, first_stats,
                                    shared_prefix_len, suffix_stats)

log = logging.getLogger("ablate.learners")
DIGESTS = "DIGESTS.json"   # sha256 of every file of a checkpoint, written before COMPLETE


class CheckpointError(RuntimeError):
    """No checkpoint of a cell can be restored (every one fails its digest or its load)."""


DUMMY = [0, 0]   # the prefix pass of a rank without a shared prefix (collectives in step)


@dataclass
class LossInputs:
    """What a loss function receives for one micro-batch; [b, T] tensors aligned to ids.
    logprobs, entropy and ref_logprobs are computed where mask is 1 and are 0 elsewhere
    (the output head runs on trained positions only: ablate/learners/head.py)."""
    logprobs: torch.Tensor                 # current policy, with grad
    old_logprobs: torch.Tensor             # the sampler's
    advantages: torch.Tensor               # [b]
    mask: torch.Tensor                     # float, 1 on policy-generated tokens
    # full-vocabulary entropy per token; its gradient is computed (in the backward, chunk
    # by chunk: batching.shifted_stats) only when the loss uses it (an entropy bonus)
    entropy: torch.Tensor
    ref_logprobs: Optional[torch.Tensor]   # frozen reference model's, or None
    num_tokens: int                        # masked tokens in the WHOLE batch (all ranks)
    num_seqs: int                          # segments with >= 1 masked token, whole batch
    # positions of this micro-batch's rows in the batch given to update() (an algorithm
    # looks up per-row data with it: episode of a segment, per-token advantages, ...)
    index: Optional[list[int]] = None


LossFn = Callable[[LossInputs], "tuple[torch.Tensor, dict]"]


@dataclass
class _Plan:
    prefix: list[int]          # this rank's shared prefix ([] = none)
    any_prefix: bool           # some rank has one: every rank runs a prefix pass
    mbs: list[MicroBatch]
    n_mb: int                  # micro-batches of the busiest rank
    rows: list[int]            # this rank's rows of the batch (all of them: one rank)


class WarmupConstant:
    """LR factor: linear warmup over `warmup` optimizer steps, then constant. A class (not
    a lambda) so the scheduler's state_dict round-trips through checkpoints."""

    def __init__(self, warmup: int):
        self.warmup = int(warmup)

    def __call__(self, step: int) -> float:
        return 1.0 if self.warmup <= 0 else min(1.0, (step + 1) / self.warmup)


def param_groups(model: torch.nn.Module, weight_decay: float) -> list[dict]:
    """Decay matrices only (not norms or biases), the usual convention; trainable only."""
    decay, rest = [], []
    for p in model.parameters():
        if p.requires_grad:
            # ZeRO-3 partitions are flat: the original shape is in ds_shape
            (decay if len(getattr(p, "ds_shape", p.shape)) >= 2 else rest).append(p)
    groups = [{"params": decay, "weight_decay": weight_decay}]
    if rest:
        groups.append({"params": rest, "weight_decay": 0.0})
    return groups


def enable_tf32() -> None:
    """float32 matmuls and convolutions on TF32 tensor cores (CUDA; torch's switches,
    https://pytorch.org/docs/stable/notes/cuda.html, "TensorFloat-32 (TF32)")."""
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True


def _in_update_threads(update):
    """Run update() on `learner.update_threads` threads (0: as the process), restored
    afterwards."""
    @functools.wraps(update)
    def run(self, *args, **kwargs):
        n, before = int(getattr(self.cfg, "update_threads", 0) or 0), torch.get_num_threads()
        if n > 0:
            torch.set_num_threads(n)
        try:
            return update(self, *args, **kwargs)
        finally:
            torch.set_num_threads(before)
    return run


class Learner:
    """See the module docstring; `model` is the trained module (a PeftModel under LoRA)."""

    model: torch.nn.Module
    # update(): the output head on trained positions only (ablate/learners/head.py);
    # False runs it everywhere, the reference of tests and benchmarks/profile_update.py
    head_on_trained_only: bool = True
    # a batched pack's joint update (ablate/learners/packed.py) when it took this learner
    joint: Any = None
    # the backward is plain autograd on one process (a joint update may run it for
    # several learners at once); False for an engine with its own (DeepSpeed)
    plain_backward: bool = False

    def __init__(self, cfg: Any, *, lr: float, seed: int, temperature: float,
                 ckpt_dir: str | os.PathLike):
        if not temperature or temperature <= 0:
            raise ValueError(f"temperature={temperature} must be > 0: logprobs are of "
                             "softmax(logits / temperature), the sampler's distribution")
        self.cfg, self.lr, self.seed = cfg, float(lr), int(seed)
        self.temperature = float(temperature)
        self.ckpt_dir = Path(ckpt_dir)
        self.keep = int(getattr(cfg, "keep_checkpoints", 2))
        self.rank, self.world_size = 0, 1
        self.device = torch.device("cpu")   # where the module runs; subclasses set it

    # --- engine-specific --------------------------------------------------------------
    def _call(self, ref: bool, **kw) -> Any: ...   # the policy's (or reference's) forward output
    def _has_ref(self) -> bool: ...
    def _backward(self, loss: torch.Tensor, last: bool, scaled: bool = False) -> None: ...
    def _step(self) -> tuple[float, float]: ...          # (grad_norm, lr used)
    def _save_state(self, path: Path, extra: dict) -> None: ...
    def _load_state(self, path: Path) -> dict: ...
    def _gathered_state_dict(self) -> dict[str, torch.Tensor]: ...
    def _gathered_trained(self) -> dict[str, torch.Tensor]: ...   # trainable params, cpu
    def _all_reduce(self, t: torch.Tensor, op: str = "sum") -> torch.Tensor:
        return t
    def _barrier(self) -> None: ...

    def close(self) -> None:
        """Release what would outlive the learner (an engine's hooks); the cell calls it
        when it ends, however it ends. Nothing to release here."""

    # --- forwards ----------------------------------------------------------------------
    def _forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self._call(False, input_ids=ids, use_cache=False).logits

    def _stats(self, mb: MicroBatch, pre: Optional[Prefix], ref: bool = False,
               entropy: bool = True, trained_only: bool = False):
        """Token logprobs / entropies [b, T] of a micro-batch, its rows run on top of the
        shared prefix when there is one (suffix positions continue after it).
        `trained_only`: the output head runs only where the mask is 1 (all a loss reads);
        every other position holds 0 (see `LossInputs`)."""
        b, T = mb.ids.shape
        P = len(pre.ids) if pre is not None else 0
        kw: dict = {"input_ids": mb.ids[:, P:], "use_cache": pre is not None}
        if pre is not None:
            kw.update(position_ids=torch.arange(P, T, device=self.device).expand(b, -1),
                      **{self._cache_kw: expanded_cache(pre, b)})
        if not trained_only:
            logits = self._call(ref, **kw).logits
            if pre is None:
                return token_stats(logits, mb.ids, self.temperature, mb.allowed, entropy)
            return suffix_stats(pre, logits, mb.ids, self.temperature, mb.allowed, entropy)
        sel = trained_positions(mb.mask, P)
        with head_rows(self._head(ref), sel.flat(T - P)):
            logits = self._call(ref, **kw).logits[0]          # [N, V], N = len(sel)
        lp, ent = sel.stats(logits, mb.ids, self.temperature, mb.allowed, entropy)
        if pre is not None:   # position P is predicted by the prefix's last logits
            lp[:, P], e = first_stats(pre, mb.ids, self.temperature, mb.allowed, entropy)
            if entropy:
                ent[:, P] = e
        return lp, ent

    def _head(self, ref: bool) -> torch.nn.Module:
        """The output projection (lm_head) of the policy or of the reference."""
        m = self._module(ref)
        return (m.get_base_model() if _is_peft(m) else m).get_output_embeddings()

    def _module(self, ref: bool) -> torch.nn.Module:
        return self.model

    def _prefix(self, ids: list, ref: bool = False, entropy: bool = True,
                trained_only: bool = False) -> Prefix:
        """The prefix's forward, with grad when grad is enabled (outputs still attached).
        `trained_only`: logits at its last position only (nothing trains on a shared
        prefix), its own logprobs / entropies 0. `ids`: one prefix, or several of equal
        length as a list of rows (one forward of several rows: Prefix.row splits it)."""
        rows = ids if ids and isinstance(ids[0], (list, tuple)) else [ids]
        x = torch.tensor(rows, dtype=torch.long, device=self.device)
        out = self._call(ref, input_ids=x, use_cache=True,
                         **({"logits_to_keep": 1} if trained_only else {}))
        cache = getattr(out, "cache", None)
        cache = out.past_key_values if cache is None else cache
        if trained_only:
            zero = torch.zeros(x.shape, dtype=torch.float32, device=self.device)
            return Prefix(list(rows[0]), cache_tensors(cache), out.logits[:, -1], zero,
                          zero.clone() if entropy else None)
        lp, ent = token_stats(out.logits, x, self.temperature, None, entropy)
        return Prefix(list(rows[0]), cache_tensors(cache), out.logits[:, -1], lp, ent)

    @functools.cached_property
    def _cache_kw(self) -> str:
        # transformers 5.24 names the KV cache argument `cache`, earlier releases
        # `past_key_values`; an unknown keyword would be ignored silently (see
        # ablate/samplers/hf.py), so use the one forward() declares
        base = self.model.get_base_model() if _is_peft(self.model) else self.model
        return "cache" if "cache" in inspect.signature(base.forward).parameters \
            else "past_key_values"

    def _plan(self, batch: Sequence, keys: Optional[Sequence] = None,
              rows: Optional[Sequence[int]] = None) -> _Plan:
        """Shared prefix, micro-batches (segments with equal `keys` together) of this
        rank's `rows` (micro-batch indices stay positions in `batch`), and what every rank
        must run alike (ZeRO-3 gathers parameters collectively inside each forward and
        backward)."""
        rows = list(range(len(batch))) if rows is None else list(rows)
        sub = [batch[i] for i in rows]
        P = 0
        if sub and getattr(self.cfg, "shared_prefix", False) and self._prefix_supported():
            P = shared_prefix_len(sub, int(getattr(self.cfg, "shared_prefix_min_tokens", 1)))
        groups = pack(sub, int(self.cfg.micro_batch_tokens), skip=P,
                      keys=None if keys is None else [keys[i] for i in rows])
        mbs = [collate(batch, [rows[j] for j in g]).to(self.device) for g in groups]
        n_mb, any_prefix = (int(x) for x in self._all_reduce(
            torch.tensor([len(mbs), float(P > 0)], dtype=torch.float64), "max").tolist())
        prefix = list(sub[0].ids[:P]) if P else []
        return _Plan(prefix, bool(any_prefix), mbs, n_mb, rows)

    def _prefix_supported(self) -> bool:
        """Full causal attention in every layer (a sliding window would need its own
        cache layout): the prefix is then plain keys and values."""
        base = self.model.get_base_model() if _is_peft(self.model) else self.model
        types = getattr(base.config, "layer_types", None) or ["full_attention"]
        return all(t == "full_attention" for t in types)

    # --- public ------------------------------------------------------------------------
    @_in_update_threads
    def update(self, batch: Sequence, advantages, loss_fn: LossFn,
               rows: Optional[Sequence[int]] = None) -> dict:
        """One optimizer step over the whole batch. The tokens all segments share at the
        start (untrained; e.g. the system prompt, see ablate/learners/prefix.py) are
        forwarded once; the rest is packed into right-padded micro-batches of at most
        `micro_batch_tokens` tokens; each gets its forward on top of the prefix, token
        logprobs / entropy at the sampler's temperature, loss_fn with the whole batch's
        counts (so the micro-batch losses sum to the batch loss) and its backward; then
        the prefix's backward, clip, step, schedule. Metrics: loss (summed), grad_norm
        (before clipping), lr (used in this step), tokens, train_tokens, forward_tokens
        (tokens the policy forwarded, prefix once, padding excluded), prefix_tokens,
        micro_batches, seconds, tokens_per_s, and loss_fn's metrics (shares summed, means
        token-weighted, *_max/*_min kept).

        `rows` (several ranks, ablate/loop/ranks.py): every rank passes the whole batch and
        forwards only its rows; token and sequence counts are summed over the ranks, so the
        step equals one rank's over all rows (tests/loop/test_distributed.py)."""
        t0 = time.perf_counter()
        adv = torch.as_tensor(advantages, dtype=torch.float32).flatten().to(self.device)
        if len(adv) != len(batch):
            raise ValueError(f"{len(adv)} advantages for {len(batch)} segments")
        # loss_fn.pack_keys: segments with equal keys share a micro-batch (e.g. DPO pairs)
        plan = self._plan(batch, getattr(loss_fn, "pack_keys", None), rows)
        if plan.n_mb == 0:
            raise ValueError("update() needs at least one segment (on some rank)")
        local = torch.tensor([sum(float(m.mask.sum()) for m in plan.mbs),
                              sum(float((m.mask.sum(1) > 0).sum()) for m in plan.mbs)],
                             dtype=torch.float64)
        num_tokens, num_seqs = (int(x) for x in self._all_reduce(local).tolist())
        if self.joint is not None:   # a batched pack: ablate/learners/packed.py
            total_loss, parts = self.joint.run(self, plan, adv, loss_fn,
                                               (num_tokens, num_seqs))
        else:
            total_loss, parts = self._accumulate(plan, adv, loss_fn, num_tokens, num_seqs)
        grad_norm, lr = self._step()
        sum_keys = SUM_METRICS | set(getattr(loss_fn, "sum_metrics", ()))
        return self._update_metrics(batch, plan, parts, sum_keys, total_loss, num_tokens,
                                    grad_norm, lr, time.perf_counter() - t0)

    def _accumulate(self, plan: _Plan, adv: torch.Tensor, loss_fn: LossFn,
                    num_tokens: int, num_seqs: int) -> tuple[float, list]:
        """update()'s gradients: the prefix pass, each micro-batch's forward, loss and
        backward, then the prefix's backward; (summed loss, [(metrics, tokens)] per
        micro-batch)."""
        pre = ref_pre = None
        only = self.head_on_trained_only
        if plan.any_prefix:   # every rank runs one prefix pass (a dummy where it has none)
            pre = self._prefix(plan.prefix or DUMMY, trained_only=only).leaves()
            with torch.no_grad():
                ref_pre = self._prefix(plan.prefix or DUMMY, ref=True, entropy=False,
                                       trained_only=only) if self._has_ref() else None
        use = pre if plan.prefix else None
        parts, total_loss = [], 0.0
        for k in range(plan.n_mb):
            last = k == plan.n_mb - 1 and pre is None
            if k >= len(plan.mbs):
                self._dummy_pass(last)
                continue
            mb = plan.mbs[k]
            lp, ent = self._stats(mb, use, trained_only=only)
            with torch.no_grad():
                ref = self._stats(mb, ref_pre if use else None, ref=True, entropy=False,
                                  trained_only=only)[0] if self._has_ref() else None
            inputs = LossInputs(lp, mb.old_logprobs, adv[mb.index], mb.mask, ent, ref,
                                num_tokens=num_tokens, num_seqs=num_seqs, index=mb.index)
            loss, metrics = loss_fn(inputs)
            self._backward(loss, last)
            if pre is not None:
                pre.flush_grads()   # bf16 prefix gradients summed in float32
            total_loss += float(loss.detach())
            parts.append((metrics, float(mb.mask.sum())))
        if pre is not None:
            self._backward(pre.vjp_loss(), True, scaled=True)
        return total_loss, parts

    def _dummy_pass(self, last: bool) -> None:
        """This rank ran out of micro-batches: a zero-loss pass keeps the collectives
        (ZeRO-3 gathers, trace checks) in step with the other ranks, in the same order."""
        dummy = torch.zeros((1, 2), dtype=torch.long, device=self.device)
        logits = self._forward(dummy)
        if self._has_ref():
            with torch.no_grad():
                self._call(True, input_ids=dummy, use_cache=False)
        self._backward(logits.float().sum() * 0.0, last)

    def _update_metrics(self, batch, plan, parts, sum_keys, total_loss, num_tokens,
                        grad_norm, lr, dt) -> dict:
        tokens = sum(len(batch[i].ids) for i in plan.rows)
        P = len(plan.prefix)
        fwd = tokens - max(len(plan.rows) - 1, 0) * P if P else tokens
        # loss and token counts over all ranks; loss_fn's own metrics stay this rank's
        total_loss, tokens, fwd = self._all_reduce(
            torch.tensor([total_loss, tokens, fwd], dtype=torch.float64)).tolist()
        out = combine_metrics(parts, sum_keys) if parts else {}
        out.update(loss=total_loss, grad_norm=float(grad_norm), lr=float(lr),
                   tokens=int(tokens), train_tokens=num_tokens, forward_tokens=int(fwd),
                   prefix_tokens=P, micro_batches=len(plan.mbs), seconds=dt,
                   tokens_per_s=tokens / dt if dt > 0 else 0.0)
        return out

    @torch.no_grad()
    def logprobs(self, batch: Sequence) -> list[torch.Tensor]:
        """Per segment, aligned to ids (position 0 = 0.0); no grad; the shared prefix is
        forwarded once, as in `update`."""
        out: list[Optional[torch.Tensor]] = [None] * len(batch)
        plan = self._plan(batch)
        pre = self._prefix(plan.prefix or DUMMY, entropy=False) if plan.any_prefix else None
        for k in range(plan.n_mb):
            if k >= len(plan.mbs):   # keep ZeRO-3's collective forwards in step across ranks
                self._forward(torch.zeros((1, 2), dtype=torch.long, device=self.device))
                continue
            mb = plan.mbs[k]
            lp, _ = self._stats(mb, pre if plan.prefix else None, entropy=False)
            for r, i in enumerate(mb.index):
                out[i] = lp[r, : mb.lengths[r]].cpu().clone()
        return out  # type: ignore[return-value]

    def export_state_dict(self) -> dict[str, torch.Tensor]:
        """Full weights on cpu under standard HF keys (LoRA merged), for the sampler."""
        # deferred: lora.py imports peft (14 s measured on the 2-core host), which a cell
        # without learner.lora.enable never loads
        from ablate.learners.lora import merged_state_dict
        sd = self._gathered_state_dict()
        return merged_state_dict(self.model, sd) if _is_peft(self.model) else sd

    def export_adapter(self):
        """The LoRA adapter alone on cpu (ablate.core.adapter.LoraAdapter: peft's saved
        format), for a sampler that loads adapters; None without LoRA. Only the trainable
        parameters are gathered: the base never leaves the learner."""
        if not _is_peft(self.model):
            return None
        # deferred: lora.py imports peft (14 s measured on the 2-core host), which a cell
        # without learner.lora.enable never loads
        from ablate.learners.lora import adapter_of
        return adapter_of(self.model, self._gathered_trained())

    # --- checkpoints ---------------------------------------------------------------------
    def save(self, step: int, client_state: dict,
             extra: Optional[Callable[[Path], None]] = None) -> None:
        """Atomic: written under .tmp-step_N, marked complete, then renamed to step_N;
        only the newest `keep_checkpoints` are kept. RNG states travel along so that a
        resumed run continues bit-exactly. `extra(folder)` writes state of its own into
        the same folder on rank 0 (an algorithm's critic or buffer, identical on every
        rank): it is digested, completed, renamed and pruned with the learner's."""
        final, tmp = self._step_dir(step), self.ckpt_dir / f".tmp-step_{step:08d}"
        if self.rank == 0:
            for stale in self.ckpt_dir.glob(".tmp-step_*"):   # saves cut short by a kill
                shutil.rmtree(stale, ignore_errors=True)
            tmp.mkdir(parents=True)
        self._barrier()
        try:
            self._save_state(tmp, {"step": int(step), "client_state": client_state,
                                   "rng": _rng_state()})
            if extra is not None and self.rank == 0:
                extra(tmp)
        except Exception as exc:   # disk full: ENOSPC, or torch's "basic_ios::clear" chain
            cause = io_cause(exc)
            if cause is None:
                raise
            shutil.rmtree(tmp, ignore_errors=True)
            raise write_error(tmp, cause) from None
        self._barrier()
        if self.rank == 0:
            write_digests(tmp)
            (tmp / "COMPLETE").write_text(str(step))
            if final.exists():
                shutil.rmtree(final)
            os.replace(tmp, final)
            for old in self._complete_dirs()[: -max(self.keep, 1)]:
                shutil.rmtree(old, ignore_errors=True)
        self._barrier()

    def load(self) -> Optional[tuple[int, dict]]:
        """Restore the newest complete checkpoint whose files match their digests and
        load: (step, client_state), or None when there is none. A corrupt or truncated
        newest one is passed over with a warning; none valid is a CheckpointError."""
        dirs = self._complete_dirs()
        problems = []
        for path in reversed(dirs):
            why = verify_digests(path)
            if why is None:
                try:
                    extra = self._load_state(path)
                except Exception as exc:   # unpickling, truncated zip, engine errors
                    why = f"cannot be loaded ({type(exc).__name__}: " \
                          f"{str(exc).splitlines()[0][:160] if str(exc) else ''})"
            if why is None:
                if problems:
                    log.warning("resuming from the older checkpoint %s: %s", path,
                                "; ".join(problems))
                _set_rng_state(extra["rng"])
                return int(extra["step"]), extra["client_state"]
            problems.append(f"{path.name} {why}")
            log.warning("checkpoint %s is not usable: %s", path, why)
        if problems:
            raise CheckpointError(f"no usable checkpoint in {self.ckpt_dir}: "
                                  + "; ".join(problems) + "; delete that directory to "
                                  "restart the cell from step 0")
        return None

    def checkpoint_dir(self, step: int) -> Path:
        """The folder of the complete checkpoint of `step` (where `extra` state lives)."""
        return self._step_dir(step)

    def _step_dir(self, step: int) -> Path:
        return self.ckpt_dir / f"step_{step:08d}"

    def _complete_dirs(self) -> list[Path]:
        if not self.ckpt_dir.is_dir():
            return []
        found = [(int(m.group(1)), p) for p in self.ckpt_dir.iterdir()
                 if (m := re.fullmatch(r"step_(\d+)", p.name)) and (p / "COMPLETE").exists()]
        return [p for _, p in sorted(found)]


# torch.save's C++ writer reports a full disk as a RuntimeError ("basic_ios::clear:
# iostream error"), and closing the zip then raises "[enforce fail at
# inline_container.cc:NNN] . unexpected pos A vs B" while handling it
IO_WORDS = ("iostream", "basic_ios", "no space", "file write", "streamwriter", "read-only",
            "errno", "inline_container", "unexpected pos")


def io_cause(exc: BaseException) -> Optional[BaseException]:
    """The I/O error (a full disk, a read-only file system) anywhere in `exc`'s chain
    (__cause__ / __context__), or None: an OSError with its strerror first, else the
    innermost matching exception, the nearest to the root cause."""
    chain, seen = [], set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        chain.append(exc)
        exc = exc.__cause__ or exc.__context__
    errors = [e for e in chain if isinstance(e, OSError) and e.strerror]
    if errors:
        return errors[0]
    found = [e for e in chain if isinstance(e, OSError)
             or any(w in str(e).lower() for w in IO_WORDS)]
    return found[-1] if found else None


def _digest(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _checkpoint_files(folder: Path) -> dict[str, Path]:
    return {p.relative_to(folder).as_posix(): p for p in sorted(folder.rglob("*"))
            if p.is_file() and p.name not in (DIGESTS, "COMPLETE")}


def write_digests(folder: Path) -> None:
    """DIGESTS.json: size and sha256 of every file written into a checkpoint folder."""
    table = {name: [p.stat().st_size, _digest(p)]
             for name, p in _checkpoint_files(folder).items()}
    (folder / DIGESTS).write_text(json.dumps(table, indent=1))


def verify_digests(folder: Path) -> Optional[str]:
    """None if every file of the checkpoint matches DIGESTS.json (or the checkpoint
    predates digests), else what is wrong."""
    index = folder / DIGESTS
    if not index.exists():
        return None
    try:
        table = json.loads(index.read_text())
    except (OSError, ValueError) as exc:
        return f"has an unreadable {DIGESTS} ({exc})"
    files = _checkpoint_files(folder)
    for name, (size, digest) in table.items():
        p = files.get(name)
        if p is None:
            return f"lacks {name}"
        if p.stat().st_size != size:
            return f"has {name} truncated ({p.stat().st_size} of {size} bytes)"
        if _digest(p) != digest:
            return f"has {name} corrupt (its sha256 differs from {DIGESTS})"
    return None


def _is_peft(model) -> bool:
    return hasattr(model, "peft_config") and hasattr(model, "merge_and_unload")


def _rng_state() -> dict:
    return {"torch": torch.get_rng_state(), "numpy": np.random.get_state(),
            "python": random.getstate()}


def _set_rng_state(s: dict) -> None:
    torch.set_rng_state(s["torch"])
    np.random.set_state(s["numpy"])
    random.setstate(s["python"])
