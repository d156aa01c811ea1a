"""Plain torch learner: the reference path (parity tests) and the simplest one to debug.
Single process on `device` (run.device; the model and the reference are moved there);
bf16 means autocast forward over fp32 master weights. A LoRA checkpoint holds the
adapters and their optimizer state only (the frozen base comes from model.path)."""
from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any, Optional

import torch

from ablate.learners.base import Learner, WarmupConstant, enable_tf32, param_groups
from ablate.learners import recompute
from ablate.learners.lora import apply_lora


class TorchLearner(Learner):
    plain_backward = True   # loss.backward() on one process (see Learner.plain_backward)

    def __init__(self, cfg: Any, model: torch.nn.Module, *, lr: float, seed: int,
                 temperature: float, ckpt_dir, ref_model: Optional[torch.nn.Module] = None,
                 device: Optional[str] = None):
        super().__init__(cfg, lr=lr, seed=seed, temperature=temperature, ckpt_dir=ckpt_dir)
        torch.manual_seed(self.seed)   # LoRA adapter init
        model = model.float() if device is None else model.to(device=device,
                                                              dtype=torch.float32)
        if ref_model is not None and device is not None:
            ref_model = ref_model.to(device)
        if cfg.lora.enable:
            model = apply_lora(model, cfg.lora)
        if cfg.activation_checkpointing:
            recompute.enable(model)
        # eval mode throughout: no dropout, so an on-policy ratio is exactly 1
        self.model = model.eval()
        self.ref = ref_model.eval().requires_grad_(False) if ref_model is not None else None
        self.optimizer = torch.optim.AdamW(param_groups(model, cfg.weight_decay), lr=self.lr,
                                           betas=tuple(cfg.betas))
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(
            self.optimizer, WarmupConstant(cfg.warmup_steps))
        self._params = [p for p in model.parameters() if p.requires_grad]
        self.device = next(model.parameters()).device   # `device`, else the caller's
        if self.device.type == "cuda" and cfg.dtype == "float32":
            enable_tf32()

    def _autocast(self):
        if self.cfg.dtype == "bfloat16":
            return torch.autocast(self.device.type, dtype=torch.bfloat16)
        return contextlib.nullcontext()

    def _call(self, ref, **kw):
        with self._autocast():
            return (self.ref if ref else self.model)(**kw)

    def _has_ref(self):
        return self.ref is not None

    def _module(self, ref):
        return self.ref if ref else self.model

    def _backward(self, loss, last, scaled=False):
        loss.backward()

    def _step(self):
        clip = float(self.cfg.grad_clip)
        norm = torch.nn.utils.clip_grad_norm_(self._params, clip if clip > 0 else float("inf"))
        lr = self.scheduler.get_last_lr()[0]
        self.optimizer.step()
        self.scheduler.step()
        self.optimizer.zero_grad(set_to_none=True)
        return float(norm), lr

    def _gathered_state_dict(self):
        return {k: v.detach().cpu().clone() for k, v in self.model.state_dict().items()}

    def _gathered_trained(self):
        return {n: p.detach().cpu().clone() for n, p in self.model.named_parameters()
                if p.requires_grad}

    def _trained_state(self) -> dict:
        """The state dict without frozen parameters (all of it without LoRA)."""
        frozen = {n for n, p in self.model.named_parameters(remove_duplicate=False)
                  if not p.requires_grad}
        return {k: v for k, v in self.model.state_dict().items() if k not in frozen}

    def _save_state(self, path: Path, extra: dict):
        torch.save({"model": self._trained_state(), "optimizer": self.optimizer.state_dict(),
                    "scheduler": self.scheduler.state_dict(), "extra": extra},
                   path / "learner.pt")

    def _load_state(self, path: Path) -> dict:
        # our own file; it holds numpy / python RNG states, hence weights_only=False
        state = torch.load(path / "learner.pt", map_location="cpu", weights_only=False)
        missing = set(self.model.load_state_dict(state["model"], strict=False).missing_keys)
        lacking = sorted(missing & set(self._trained_state()))
        if lacking:
            raise RuntimeError(f"checkpoint {path} lacks trained weights {lacking[:3]}")
        self.optimizer.load_state_dict(state["optimizer"])
        self.scheduler.load_state_dict(state["scheduler"])
        return state["extra"]
