"""The memory plan: the bytes a cell needs on one learner device, from the model's shape
alone (its config built on the meta device: no weights, no GPU), checked by preflight
before any work (docs/gpu.md, "Memory plan").

    plan = memory_plan(cfg)               # model.path's config.json, run.device's memory
    plan = memory_plan(cfg, model_config=transformers.Qwen3Config(...), world_size=2,
                       device_bytes=80e9)
    print(plan.table()); plan.refusal()   # None, or the one-line reason and what to change

Three phases share the device: the rollout (the learner's resident state beside the
sampler's memory), the update (the resident state plus activations, logits and the
gradients' buffers; an in-process vLLM sleeps through it when
sampler.sleep_during_update) and the optimizer step (its temporaries). The peak of the
three is compared with the device's memory: run.device_memory_gb (a planning override,
GB = 1e9 bytes; enforced on any device, and on run.device=cuda where no GPU is visible
the plan is made and its verdict named in the refusal of the missing device:
without_gpu), else the CUDA device's total memory, else (run.device=cpu) the host's RAM,
where the plan is only reported, never a refusal (a CPU cell swaps or is killed; it does
not corrupt anything, and the tiny CPU cells are far from any limit). config.json alone
sizes the plan (model_dir). Beside the peak (allocated) the plan gives what torch's
caching allocator reserves (MemoryPlan.reserved) and the host RAM of offload and of the
engine's host copies (MemoryPlan.host), the latter refused where the cell runs here.
Checked against measured GPU runs: benchmarks/results/memory_measured.json.

This module composes the terms and gives the verdict; the terms are declared by their
owners where they register (ablate.core.registry.Declaration.memory): the learner
backends' (ablate/learners/memory.py), the algorithms' (ablate/algos/memory.py) and the
sampler backends' (ablate/samplers/memory.py); the model's Shape is measured by
ablate/models/measure.py."""
from __future__ import annotations

import copy
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

import torch
from omegaconf import DictConfig, OmegaConf, open_dict

from ablate.core.dist import env_world_size
from ablate.core.errors import ConfigError
from ablate.core.plan import GB, PlanContext, Shape, Term, sel
from ablate.models.loading import ModelNotFoundError, resolve_weights
from ablate.models.measure import shape_of, shape_of_dir
from ablate.models.tiny import tiny_path

__all__ = ["GB", "MemoryPlan", "Shape", "Term", "memory_plan", "shape_of", "shape_of_dir"]
WARN_FRACTION = 0.9   # a plan above 90% of the device leaves little for fragmentation
OVERRIDE = "run.device_memory_gb"   # the device memory a user states (GB = 1e9 bytes)
PHASES = ("rollout", "update", "step")   # on the device, each beside the resident terms


@dataclass
class MemoryPlan:
    shape: Shape
    terms: list[Term]
    device: str
    device_bytes: float
    device_source: str
    world_size: int
    trainable: int
    problems: list[str] = field(default_factory=list)   # refusals beyond the total
    suggestions: list[str] = field(default_factory=list)
    host_bytes: float = 0.0          # this machine's RAM (0: not planned)
    host_enforced: bool = False      # planned on the machine that runs the cell
    local_ranks: int = 1             # ranks sharing this machine's RAM

    def phase_total(self, phase: str) -> float:
        return sum(t.bytes for t in self.terms if t.phase in ("resident", phase))

    def _sum(self, *phases: str) -> float:
        return sum(t.bytes for t in self.terms if t.phase in phases)

    @property
    def peak_phase(self) -> str:
        return max(PHASES, key=self.phase_total)

    @property
    def peak(self) -> float:
        return self.phase_total(self.peak_phase)

    @property
    def reserved(self) -> float:
        """What torch's caching allocator holds at its high-water mark: the update's,
        the step's and the slack's blocks each in segments of their own (the step's
        sub-group buffers are larger than any block the update freed; measured: the
        H200 full fine-tune row reserved 19.2 GiB above its allocated peak,
        benchmarks/results/memory_measured.json); the rollout's memory is returned before
        the update (vLLM sleeps in its own pool; the cached blocks are emptied before it
        wakes, ablate/samplers/vllm.py)."""
        learner = self._sum("resident", "update", "step", "slack")
        return max(self.phase_total("rollout"), learner)

    @property
    def host(self) -> float:
        """Host RAM of this machine's ranks (offload, the engine's host copies)."""
        return self._sum("host") * self.local_ranks

    @property
    def fits(self) -> bool:
        return self.peak <= self.device_bytes and not self.problems

    @property
    def enforced(self) -> bool:
        """On a GPU; on CPU only against a memory the user gave (run.device_memory_gb):
        host RAM is reported, a stated budget is kept (issue 64 item 13)."""
        return self.device != "cpu" or self.device_source == OVERRIDE

    def biggest(self, n: int = 3) -> list[Term]:
        on = [t for t in self.terms if t.phase in ("resident", self.peak_phase) and t.bytes]
        return sorted(on, key=lambda t: -t.bytes)[:n]

    def host_line(self) -> Optional[str]:
        """One line when the host terms exceed this machine's RAM, else None."""
        if self.device == "cpu" or not self.host_bytes or self.host <= self.host_bytes:
            return None
        big = ", ".join(f"{t.name} {t.bytes / GB:.1f}" for t in sorted(
            (t for t in self.terms if t.phase == "host" and t.bytes), key=lambda t: -t.bytes))
        return (f"host RAM: {self.host / GB:.1f} GB for {self.local_ranks} rank(s) here > "
                f"{self.host_bytes / GB:.1f} GB of this machine ({big} GB per rank); "
                "more ranks partition the offloaded state, or drop offload (learner."
                "ds_overrides) where the GPUs hold it")

    def refusal(self) -> Optional[str]:
        """None when the cell fits (or on CPU); else one line: total, biggest terms, what
        to change; host RAM short on the machine that runs it is refused too."""
        host = self.host_line() if self.host_enforced else None
        if self.fits or not self.enforced:
            return f"memory plan: {host}" if host else None
        big = ", ".join(f"{t.name} {t.bytes / GB:.1f}" for t in self.biggest())
        why = "; ".join(self.problems) + "; " if self.problems else ""
        fix = ("fits with: " + "; ".join(self.suggestions) if self.suggestions else
               "no single change fits: combine learner.lora.enable=true, offload, more "
               "ranks, a lower learner.micro_batch_tokens, sampler=vllm_server")
        cpu = ("; or drop run.device_memory_gb (on CPU a plan against host RAM is only "
               "reported)" if self.device == "cpu" else "")
        over = ">" if self.peak > self.device_bytes else "within"
        return (f"memory plan: {why}{self.peak / GB:.1f} GB per device at the "
                f"{self.peak_phase} {over} {self.device_bytes / GB:.1f} GB on {self.device} "
                f"({self.device_source}); biggest: {big} GB; {fix}{cpu}"
                + (f"; {host}" if host else ""))

    def table(self) -> str:
        s = self.shape
        head = (f"memory plan: {s.arch} {_count(s.params)} params ({_count(self.trainable)}"
                f" trained), {self.world_size} rank(s), {self.device} "
                f"{self.device_bytes / GB:.1f} GB ({self.device_source})")
        rows = [f"  {t.name:<22}{t.bytes / GB:>9.2f} GB  {t.phase:<8} {t.note}"
                for t in self.terms if t.bytes]
        tight = self.peak > WARN_FRACTION * self.device_bytes
        verdict = ("fits, tight" if tight else "fits") if self.fits else ("exceeds (CPU: reported only)"
                                            if not self.enforced else "DOES NOT FIT")
        flush = (" (above the device: the allocator will free its cache and retry, "
                 "slower steps)" if self.reserved > self.device_bytes else "")
        tail = [f"  peak ({self.peak_phase}) {self.peak / GB:.1f} GB of "
                f"{self.device_bytes / GB:.1f} GB: {verdict}",
                f"  reserved by torch's allocator ~{self.reserved / GB:.1f} GB{flush}"]
        if self.host:
            tail.append(f"  host RAM {self.host / GB:.1f} GB for {self.local_ranks} rank(s)"
                        f" of {self.host_bytes / GB:.1f} GB"
                        + ("" if self.host <= self.host_bytes else ": SHORT"))
        return "\n".join([head, *rows, *tail])

    def as_dict(self) -> dict:
        return {"peak_gb": self.peak / GB, "peak_phase": self.peak_phase,
                "reserved_gb": self.reserved / GB, "host_gb": self.host / GB,
                "device_gb": self.device_bytes / GB, "fits": self.fits,
                "params": self.shape.params, "trainable": self.trainable,
                "terms": {t.name: t.bytes / GB for t in self.terms}}


# --- the terms: declared by their owners where they register -----------------------------

def _owners():
    """(LEARNERS, ALGORITHMS, SAMPLERS, the objective's terms): the registries whose
    entries declare the terms."""
    # deferred (each): the owners' registries load transformers (ablate.learners: +0.55 s,
    # 316 modules, 2-core host), which `import ablate.apps.memory_plan` alone need not pay
    from ablate.algos.memory import objective_terms  # deferred: as above
    from ablate.algos.registry import ALGORITHMS  # deferred: as above
    from ablate.learners import LEARNERS  # deferred: as above
    from ablate.samplers import SAMPLERS  # deferred: as above
    return LEARNERS, ALGORITHMS, SAMPLERS, objective_terms


def declared_terms(cfg, shape: Shape, ctx: PlanContext) -> tuple[list[Term], list[str]]:
    """The learner's, the algorithm's and the sampler's declared terms, in that order."""
    LEARNERS, ALGORITHMS, SAMPLERS, objective_terms = _owners()
    owners = [LEARNERS.declared(str(cfg.learner.name)).memory, objective_terms,
              ALGORITHMS.declared(str(sel(cfg, "algo.algorithm", "pg"))).memory,
              SAMPLERS.declared(str(cfg.sampler.name)).memory]
    terms, problems = [], []
    for memory in owners:
        if memory is not None:
            t, p = memory(cfg, shape, ctx)
            terms, problems = terms + t, problems + p
    return terms, problems


def checkpoint_terms(cfg, shape: Shape) -> list[Term]:
    """What a checkpoint holds beyond the trained parameters' 12 bytes (the learner's
    declared `checkpoint` terms, e.g. DeepSpeed's module copy below ZeRO-3)."""
    terms, _ = declared_terms(cfg, shape, PlanContext(1, 0.0))
    return [t for t in terms if t.phase == "checkpoint"]


# --- the plan ----------------------------------------------------------------------------

def device_memory(cfg) -> tuple[str, float, str]:
    """(device, bytes, where the number comes from)."""
    device = str(cfg.run.device)
    override = sel(cfg, "run.device_memory_gb")
    kind = "cpu" if device == "cpu" else "cuda"
    if override is not None:
        return kind, float(override) * GB, OVERRIDE
    if kind == "cuda" and torch.cuda.is_available():
        index = torch.device(device).index
        if index is None:
            index = int(os.environ.get("LOCAL_RANK", "0"))
        return kind, float(torch.cuda.get_device_properties(index).total_memory), \
            f"cuda:{index} total memory"
    pages = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    return kind, float(pages), "host RAM"


def plan_for(cfg, shape: Shape, world: int, device: str, device_bytes: float,
             source: str, prompt_tokens: int = 0) -> MemoryPlan:
    ctx = PlanContext(world, device_bytes, local_ranks(world), int(prompt_tokens))
    terms, problems = declared_terms(cfg, shape, ctx)
    terms = [t for t in terms if t.phase != "checkpoint"]   # on disk: checkpoint_terms
    lo = cfg.learner.lora
    trained = shape.lora_params(int(lo.rank), lo.target_modules) if lo.enable else shape.params
    return MemoryPlan(shape, terms, device, device_bytes, source, world, trained, problems,
                      local_ranks=ctx.local_ranks)


def local_ranks(world: int) -> int:
    """Ranks on this machine: the launcher's LOCAL_WORLD_SIZE, else all (one machine)."""
    return max(1, min(world, int(os.environ.get("LOCAL_WORLD_SIZE") or world)))


def host_memory() -> float:
    """This machine's RAM (bytes)."""
    return float(os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))


def memory_plan(cfg: DictConfig, *, model_config=None, world_size: Optional[int] = None,
                device_bytes: Optional[float] = None, suggest: bool = True,
                prompt_tokens: int = 0, host_bytes: Optional[float] = None
                ) -> Optional[MemoryPlan]:
    """The plan of `cfg` (None for a model-less policy: model=scripted); with `suggest`,
    a refused plan lists the single changes that would fit. `prompt_tokens`: the prompt
    before the question (preflight counts it), for the KV cache's context; `host_bytes`:
    the RAM to plan offload against (default this machine's; a refusal only where the
    cell runs here, on its visible GPU, else a warning)."""
    shape = _shape(cfg, model_config)
    if shape is None:
        return None
    world = int(world_size or env_world_size())
    device, have, source = device_memory(cfg)
    if device_bytes is not None:
        have, source = float(device_bytes), "given"
    plan = plan_for(cfg, shape, world, device, have, source, prompt_tokens)
    plan.host_bytes = host_memory() if host_bytes is None else float(host_bytes)
    plan.host_enforced = source.startswith("cuda:")     # the GPU is here: so is its host
    if suggest and not plan.fits and plan.enforced:
        plan.suggestions = suggestions(cfg, shape, world, device, have, source,
                                       prompt_tokens)
    return plan


def _shape(cfg, model_config) -> Optional[Shape]:
    if model_config is not None:
        return shape_of(model_config)
    path = model_dir(cfg)
    return None if path is None else shape_of_dir(str(path), bool(cfg.model.trust_remote_code))


def model_dir(cfg) -> Optional[Path]:
    """The directory whose config.json the plan reads (None: model=scripted). config.json
    alone sizes a plan (docs/gpu.md); the weights and tokenizer a cell needs are
    preflight's (ablate/models/budget.py, check_weights)."""
    m = cfg.model
    if str(m.name) == "scripted":
        return None
    try:
        path = tiny_path(m) if str(m.name) == "tiny" else Path(resolve_weights(m))
    except ModelNotFoundError as exc:     # its messages name model.path / model=NAME
        raise ConfigError(str(exc)) from None
    if not (path / "config.json").is_file():
        raise ConfigError(f"model.path={m.path!r}: no config.json in {path}, which the "
                          "memory plan reads the model's shape from")
    return path


def without_gpu(cfg) -> str:
    """The refusal of run.device=cuda where no CUDA device is visible. With
    run.device_memory_gb the cell is planned first (its table printed unless run.quiet)
    and the line gives the plan's verdict: what to change, or that it fits, so a GPU
    cell is sized on a machine without one (docs/gpu.md, "Memory plan")."""
    head = f"run.device={cfg.run.device!r}: no CUDA device is visible here"
    if sel(cfg, OVERRIDE) is None:
        return (f"{head}; use run.device=cpu, or give {OVERRIDE}=GB to plan the cell's "
                "memory for that GPU without one")
    plan = memory_plan(cfg)
    if plan is None:
        return f"{head} (model={cfg.model.name} has no memory plan); use run.device=cpu"
    if not cfg.run.quiet:
        print(plan.table())
    verdict = plan.refusal() or (
        f"the memory plan fits: {plan.peak / GB:.1f} GB at the {plan.peak_phase} of "
        f"{plan.device_bytes / GB:.1f} GB ({OVERRIDE}); run it where that GPU is")
    return f"{head}, so the cell was only planned: {verdict}"


def suggestions(cfg, shape, world, device, have, source, prompt=0) -> list[str]:
    """Single changes that make the plan fit, each with its peak; if none does, the
    first cumulative combination of them that fits."""
    steps = _changes(cfg, world)
    fitting = []
    for label, updates, w in steps:
        p = plan_for(_apply(cfg, updates), shape, w, device, have, source, prompt)
        if p.fits:
            fitting.append(f"{label} ({p.peak / GB:.1f} GB)")
    if fitting:
        return fitting
    c, w, labels = cfg, world, []
    for label, updates, step_world in steps:   # the same changes one on top of the other
        c, w = _apply(c, updates), step_world if step_world != world else w
        labels.append(label)
        p = plan_for(c, shape, w, device, have, source, prompt)
        if p.fits:
            return [" + ".join(labels) + f" ({p.peak / GB:.1f} GB)"]
    return []


def _changes(cfg, world: int) -> list[tuple[str, dict, int]]:
    """(label, updates, world size) of each single change worth planning: LoRA, smaller
    micro-batches, the learner's declared remedies, a sampler on its own devices."""
    LEARNERS, _, SAMPLERS, _ = _owners()
    lc, out = cfg.learner, []
    if not lc.lora.enable:
        out.append(("learner.lora.enable=true", {"learner.lora.enable": True}, world))
    for mbt in (int(lc.micro_batch_tokens) // 2 ** k for k in (1, 2, 3)):
        if mbt >= 1024:
            out.append((f"learner.micro_batch_tokens={mbt}",
                        {"learner.micro_batch_tokens": mbt}, world))
    remedies = LEARNERS.declared(str(lc.name)).remedies
    out += remedies(cfg, world) if remedies else []
    here = SAMPLERS.declared(str(cfg.sampler.name))
    if not here.can("own_devices"):
        out += [(f"sampler={n}", {"sampler": n}, world) for n in SAMPLERS.builtin()
                if SAMPLERS.declared(n).can("own_devices")]
    return out


def _apply(cfg, updates: dict):
    """The config after the change: `sampler`/`learner` select another backend's schema
    (its own keys at their defaults), other keys are set."""
    LEARNERS, _, SAMPLERS, _ = _owners()
    out = copy.deepcopy(cfg)
    with open_dict(out):
        for key, value in updates.items():
            axis = {"sampler": SAMPLERS, "learner": LEARNERS}.get(key)
            if axis is not None:
                node = OmegaConf.structured(axis.config(value))
                node = OmegaConf.merge(node, {k: v for k, v in out[key].items()
                                              if k in axis.schema_keys(value) and k != "name"})
                out[key] = node
            else:
                OmegaConf.update(out, key, value, merge=True)
    return out


def _count(n: float) -> str:
    """A parameter count in the unit that reads: 4.02B, 4.44M, 13.3K."""
    for unit, size in (("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if n >= size:
            return f"{n / size:.3g}{unit}"
    return f"{int(n)}"
