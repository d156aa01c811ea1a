"""DeepSpeed learner (ZeRO stage 0-3, default 3), on CPU too (world size 1 without a
launcher, the client torch AdamW, parameters gathered inside each forward and backward:
tests/learners/test_learners.py checks it against the plain torch learner).

Gradient accumulation: the number of micro-batches differs from update to update, so the
engine is configured with gradient_accumulation_steps = 1 (backward never rescales the
loss; our loss_fn already divides by whole-batch counts) and the accumulation boundary is
set by hand: False before every backward except the last, then one engine.step(). This is
DeepSpeed's documented `set_gradient_accumulation_boundary` pattern; ZeRO-3 reduce-scatters
each micro-batch's gradients into the partitioned fp32 accumulators, and clipping and the
optimizer step run once at the boundary.

Across N data-parallel ranks DeepSpeed averages gradients (divides by N); each rank's loss
is its share of the global-count loss, so the loss is multiplied by N before backward to
get the sum."""
from __future__ import annotations

import os
import socket
import warnings
from pathlib import Path
from typing import Any, Optional

import torch

from ablate.learners.base import Learner, WarmupConstant, enable_tf32, param_groups
from ablate.learners import recompute
from ablate.learners.lora import apply_lora

# torch 2.13 deprecates an API DeepSpeed calls on every step (reduce_scatter_tensor)
warnings.filterwarnings("ignore", category=FutureWarning, message=r"`torch\.distributed\.")

CKPT_TAG = "ds"


DIST_KEYS = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")
OWNER = "ABLATE_DIST_ENV_PID"   # the process that set DIST_KEYS itself (no launcher)


def ensure_dist_env() -> None:
    """World size 1 without a launcher: deepspeed.initialize otherwise tries mpi4py.
    A launcher's (torchrun, deepspeed) variables are kept. Ours are not inherited: a child
    of a process that trained (a CLI run from a test, a sweep worker) would otherwise reuse
    the parent's MASTER_PORT, on which the parent's store still listens (EADDRINUSE)."""
    owner = os.environ.get(OWNER)
    if "RANK" in os.environ and "WORLD_SIZE" in os.environ and owner in (None, str(os.getpid())):
        return
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    os.environ.update(zip(DIST_KEYS, ("0", "0", "1", "127.0.0.1", str(port))))
    os.environ[OWNER] = str(os.getpid())


def _merge(base: dict, over: dict) -> dict:
    out = dict(base)
    for k, v in (over or {}).items():
        out[k] = _merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def ds_config(cfg: Any) -> dict:
    """The engine config of a LearnerConfig (plus its `ds_overrides`, deep-merged)."""
    from omegaconf import OmegaConf
    over = cfg.ds_overrides if hasattr(cfg, "ds_overrides") else {}
    if not isinstance(over, dict):
        over = OmegaConf.to_container(over, resolve=True)
    base = {
        "train_micro_batch_size_per_gpu": 1,
        "gradient_accumulation_steps": 1,       # see module docstring
        "gradient_clipping": float(cfg.grad_clip),
        # ZeRO-3 otherwise replaces torch.nn.functional.linear process-wide, for good, by
        # an autograd.Function (deepspeed/runtime/zero/linear.py): every linear call of
        # the HF sampler in this process then paid its dispatch, half of the linears'
        # time in an evaluation (docs/cpu.md); gradients are unchanged (tests/learners/test_learners.py)
        "zero_optimization": {"stage": int(cfg.zero_stage), "memory_efficient_linear": False},
        "zero_force_ds_cpu_optimizer": False,   # client torch AdamW; DeepSpeedCPUAdam JITs ~2 min
        "bf16": {"enabled": cfg.dtype == "bfloat16"},
        "steps_per_print": 10 ** 9,
        "wall_clock_breakdown": False,
    }
    if cfg.dtype == "bfloat16" and int(cfg.zero_stage) >= 1:
        # gradients summed over micro-batches in fp32 (DeepSpeed's data_types config,
        # deepspeed/runtime/engine.py get_data_types; stage 0 supports no such mix)
        base["data_types"] = {"grad_accum_dtype": "fp32"}
    return _merge(base, over)


def cpu_adam(config: dict) -> bool:
    """DeepSpeedCPUAdam only where ZeRO offloads the optimizer to the CPU (its fused
    step, deepspeed/ops/adam/cpu_adam.py); torch AdamW otherwise, since the op
    JIT-compiles for ~2 min on first use."""
    off = config.get("zero_optimization", {}).get("offload_optimizer") or {}
    return str(off.get("device", "none")).lower() == "cpu"


def make_optimizer(model: torch.nn.Module, cfg: Any, lr: float, config: dict):
    groups = param_groups(model, cfg.weight_decay)
    if cpu_adam(config):
        from deepspeed.ops.adam import DeepSpeedCPUAdam
        return DeepSpeedCPUAdam(groups, lr=lr, betas=tuple(cfg.betas), adamw_mode=True)
    return torch.optim.AdamW(groups, lr=lr, betas=tuple(cfg.betas))


def check_device(engine_device: torch.device, device: Optional[str]) -> None:
    """The engine runs where `run.device` asked (DeepSpeed picks its accelerator itself)."""
    have = torch.device(engine_device).type
    if device is not None and have != torch.device(device).type:
        raise ValueError(f"run.device={device} but DeepSpeed's accelerator is {have}: "
                         f"choose run.device={have} or install DeepSpeed for {device}")


def _cache_clear(fn) -> None:
    """Clear the lru_cache inside `fn`, found through __wrapped__ or its closure
    (DeepSpeed's instrument_w_nvtx wraps without functools.wraps); a cache only: every
    live engine recomputes what it needs."""
    seen = set()
    while fn is not None and id(fn) not in seen:
        seen.add(id(fn))
        if hasattr(fn, "cache_clear"):
            fn.cache_clear()
            return
        inner = getattr(fn, "__wrapped__", None)
        cells = [c.cell_contents for c in (getattr(fn, "__closure__", None) or ())
                 if callable(c.cell_contents)]
        fn = inner if inner is not None else (cells[0] if cells else None)


class DeepSpeedLearner(Learner):
    def __init__(self, cfg: Any, model: torch.nn.Module, *, lr: float, seed: int,
                 temperature: float, ckpt_dir, ref_model: Optional[torch.nn.Module] = None,
                 device: Optional[str] = None):
        super().__init__(cfg, lr=lr, seed=seed, temperature=temperature, ckpt_dir=ckpt_dir)
        ensure_dist_env()
        import deepspeed
        torch.manual_seed(self.seed)   # LoRA adapter init
        if cfg.dtype == "float32" and not any(hasattr(p, "ds_id") for p in model.parameters()):
            model = model.float()   # a bf16 checkpoint trains on fp32 weights (bf16: engine casts)
        if cfg.lora.enable:
            model = apply_lora(model, cfg.lora)
        if cfg.activation_checkpointing:
            recompute.enable(model)
        model.eval()   # no dropout: an on-policy ratio is exactly 1
        self.config = ds_config(cfg)
        optimizer = make_optimizer(model, cfg, self.lr, self.config)
        warmup = WarmupConstant(cfg.warmup_steps)
        # a callable: DeepSpeed builds the scheduler on the optimizer it wraps
        self.engine, _, _, self.scheduler = deepspeed.initialize(
            model=model, optimizer=optimizer, config=self.config,
            lr_scheduler=lambda opt: torch.optim.lr_scheduler.LambdaLR(opt, warmup))
        self.model = self.engine.module
        self.rank = self.engine.global_rank
        self.world_size = self.engine.world_size
        self.device = self.engine.device   # the accelerator DeepSpeed picked (cpu here)
        check_device(self.device, device)
        if self.device.type == "cuda" and cfg.dtype == "float32":
            enable_tf32()
        self.ref = None
        if ref_model is not None:
            # frozen reference: an optimizer-less engine, partitioned like the policy
            ref_cfg = {k: v for k, v in self.config.items() if k != "gradient_clipping"}
            self.ref = deepspeed.initialize(model=ref_model.eval().requires_grad_(False),
                                            config=ref_cfg)[0]
            self.ref.eval()

    def close(self) -> None:
        """Let the engines go. DeepSpeed 0.19.8 holds every ZeRO-3 engine of a process
        for good in three places: its hooks (removed by DeepSpeedEngine.destroy), its top
        module on the module stack (deepspeed/runtime/zero/parameter_offload.py
        `setup_zero_stage3_hooks` appends it, nothing removes it) and the class-level
        lru_cache of PartitionedParameterCoordinator.__params_to_release
        (deepspeed/runtime/zero/partitioned_param_coordinator.py), keyed by each
        coordinator and submodule. Without all three, every cell of an in-process grid
        (Hydra's basic launcher) kept its learner's model and optimizer alive, about
        100 MB a tiny cell (tests/learners/test_learners.py)."""
        # deferred as at the module's other deepspeed imports: only a DeepSpeed cell
        from deepspeed.runtime.zero import parameter_offload, partitioned_param_coordinator
        for engine in (self.engine, self.ref):
            if engine is None:
                continue
            engine.destroy()
            stack = parameter_offload.FWD_MODULE_STACK
            stack[:] = [m for m in stack if m is not engine.module]
        coordinator = partitioned_param_coordinator.PartitionedParameterCoordinator
        _cache_clear(getattr(coordinator, "_PartitionedParameterCoordinator__params_to_release",
                             None))

    def _call(self, ref, **kw):
        return (self.ref if ref else self.engine)(**kw)

    def _has_ref(self):
        return self.ref is not None

    def _module(self, ref):
        return self.ref.module if ref else self.engine.module

    def _backward(self, loss, last, scaled=False):
        """`scaled`: the loss already carries the world-size factor and the optimizer's
        loss scale (fp16 via ds_overrides; 1 otherwise), which engine.backward applies
        again: the shared prefix's backward, whose upstream gradients came from the
        micro-batches' scaled losses."""
        self.engine.set_gradient_accumulation_boundary(last)
        if scaled:
            loss = loss / float(getattr(self.engine.optimizer, "loss_scale", 1.0))
            # ZeRO-3 advances its accumulate-vs-copy counter (micro_step_id) only at the
            # next forward (deepspeed/runtime/zero/stage3.py, clear_backward_seen_flag);
            # the prefix's backward follows the last micro-batch's backward with no
            # forward between, so without this it would overwrite their gradients
            advance = getattr(self.engine.optimizer, "clear_backward_seen_flag", None)
            if advance is not None:
                advance()
        self.engine.backward(loss if scaled else loss * self.world_size)

    def _step(self):
        lr = self.scheduler.get_last_lr()[0]
        pre = None
        if self.engine.zero_optimization_stage() == 0:   # stage 0 clips without keeping the norm
            norms = [torch.linalg.vector_norm(p.grad.float())
                     for p in self.model.parameters() if p.grad is not None]
            pre = float(torch.linalg.vector_norm(torch.stack(norms))) if norms else 0.0
        self.engine.step()
        norm = self.engine.get_global_grad_norm() if pre is None else pre
        return float(norm) if norm is not None else float("nan"), lr

    def _all_reduce(self, t, op="sum"):
        if self.world_size == 1:
            return t
        import deepspeed.comm as dist
        t = t.to(self.device, copy=True)   # nccl needs device tensors; gloo takes cpu ones
        dist.all_reduce(t, op=dist.ReduceOp.MAX if op == "max" else dist.ReduceOp.SUM)
        return t.cpu()

    def _barrier(self):
        if self.world_size > 1:
            import deepspeed.comm as dist
            dist.barrier()

    def _gathered_state_dict(self):
        """Parameter by parameter (a collective on every rank), so the peak is one full
        tensor beyond the cpu copy; standard keys, tied names included."""
        import deepspeed
        keys = set(self.model.state_dict().keys())
        out = {}
        for name, p in self.model.named_parameters(remove_duplicate=False):
            with deepspeed.zero.GatheredParameters([p], modifier_rank=None):
                if name in keys:
                    out[name] = p.detach().cpu().clone()
        for name, b in self.model.named_buffers():
            if name in keys:
                out[name] = b.detach().cpu().clone()
        return {k: out[k] for k in self.model.state_dict().keys() if k in out}

    def _gathered_trained(self):
        """The trainable parameters only (LoRA: the adapters), gathered together: a
        collective on every rank, megabytes under LoRA."""
        import deepspeed
        params = [(n, p) for n, p in self.model.named_parameters() if p.requires_grad]
        with deepspeed.zero.GatheredParameters([p for _, p in params], modifier_rank=None):
            return {n: p.detach().cpu().clone() for n, p in params}

    def _save_state(self, path: Path, extra: dict):
        # LoRA: the frozen base is not saved (it is reloaded from model.path on resume)
        self.engine.save_checkpoint(str(path), tag=CKPT_TAG, client_state={"ablate": extra},
                                    exclude_frozen_parameters=bool(self.cfg.lora.enable))

    def _load_state(self, path: Path) -> dict:
        # non-strict under LoRA: the checkpoint's module state lacks the frozen base
        loaded, client = self.engine.load_checkpoint(
            str(path), tag=CKPT_TAG, load_module_strict=not self.cfg.lora.enable)
        if loaded is None:
            raise RuntimeError(f"DeepSpeed could not load the checkpoint in {path}")
        return client["ablate"]
