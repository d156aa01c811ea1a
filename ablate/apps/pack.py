"""`hydra/launcher=pack` (issue 62, docs/packs.md): a -m grid's LoRA cells grouped into
packs of cells that could share one base model, one process per pack.

    launch (the grid's process; hydra_plugins/ablate_pack_launcher/pack_launcher.py)
      every job composed as Hydra's BasicLauncher composes it (load_sweep_config)
        -> PackedCell (job number, overrides, config, directory)
      make_packs: grouped by what they must share (SHARED), at most hydra.launcher.size
        a pack -> one line per pack
      each pack, one after another: a process of its own (python -m ablate.apps.pack_worker)
    run_pack (the pack's process): the seam of the shared-base execution. Today each cell
      runs whole, one after another, through hydra.core.utils.run_job and the task
      function (ablate.apps.cli._hydra_main -> _grid_cell), exactly as a solo cell of a
      grid runs: its own directory and rows, FAILED alone, the grid's report, complete
      cells skipped and killed ones resumed by run_cell.

A full fine-tune cell never packs (the cells of a pack differ only in their adapters):
check_job refuses such a grid at preflight, in one line, before any directory exists.
"""
from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

from hydra.core.hydra_config import HydraConfig
from hydra.core.singleton import Singleton
from hydra.core.utils import JobReturn, configure_log, run_job, setup_globals
import cloudpickle   # what hydra/launcher=joblib (loky) ships jobs with
from omegaconf import DictConfig, OmegaConf, open_dict

from ablate.apps.pack_turns import take_turns
from ablate.core.errors import ConfigError
from ablate.learners import LEARNERS
from ablate.learners.packed import joint_updates
from ablate.loop.cell import PACK_ENV
from ablate.models.loading import shared_bases
from ablate.samplers import SAMPLERS
from ablate.samplers.packed import batched

log = logging.getLogger("ablate.pack")
TARGET = "hydra_plugins.ablate_pack_launcher.pack_launcher.PackLauncher"
# What the cells of one pack agree on: the base model they share (its weights and
# dtype), the shape of the LoRA adapters on it, the backends that hold base and
# adapters, and the device. Their reward, algorithm, learning rate, seed and
# evaluation are their own.
SHARED = ("model.name", "model.path", "model.hf_id", "model.dtype", "learner.lora.rank",
          "learner.lora.alpha", "learner.lora.target_modules", "sampler.name",
          "learner.name", "run.device")


@dataclass
class PackedCell:
    """One cell of a pack: what Hydra's BasicLauncher hands run_job, and where the
    cell writes."""
    index: int               # hydra.job.num: the job's place in the grid
    overrides: list[str]     # the job's overrides, as the sweeper gave them
    config: DictConfig       # load_sweep_config's result: the hydra node included
    dir: Path                # hydra.sweep.dir / hydra.sweep.subdir
    name: str                # hydra.job.override_dirname ("default" for none)

    @property
    def cfg(self) -> DictConfig:
        """The cell's config as run_cell receives it (no hydra node)."""
        return OmegaConf.masked_copy(self.config, [k for k in self.config if k != "hydra"])


@dataclass
class Pack:
    """Cells that share a base model, LoRA shape, backends and device (SHARED)."""
    id: int                  # 1-based, in the order of the grid's first job of each pack
    of: int                  # how many packs the grid makes
    cells: list[PackedCell]
    shared: dict             # SHARED key -> the value every cell of the pack has
    why: str = ""            # why its cells are not in the pack before it ("" for pack 1)
    size: int = 8            # hydra.launcher.size
    exact: bool = False      # hydra.launcher.exact (false: batched rollouts, docs/packs.md)
    joint: bool = False      # hydra.launcher.joint_updates, resolved (joint_on)
    kept_tokens: int | None = None   # hydra.launcher.kept_tokens (batched: Sampler.cap_kept)
    shared_base: bool = False   # its cells ran over one base model (run_pack)

    def line(self) -> str:
        s = self.shared
        model = s["model.name"] + (f" ({s['model.path']})" if s["model.path"] else "")
        targets = ",".join(s["learner.lora.target_modules"] or ())
        text = (f"pack {self.id} of {self.of}: {len(self.cells)} "
                f"cell{'s' if len(self.cells) != 1 else ''}, model={model} "
                f"lora r{s['learner.lora.rank']} alpha {s['learner.lora.alpha']} "
                f"[{targets}] sampler={s['sampler.name']} learner={s['learner.name']} "
                f"device={s['run.device']}"
                + (" exact" if self.exact else " joint updates" if self.joint else ""))
        return text + (f"; {self.why}" if self.why else "")

    def record(self) -> dict:
        """environment.json's `pack` (ablate/loop/cell.py): which pack ran the cell, its
        cells' directories, what they share, whether they shared a base model in one
        process (run_pack) and whether their rollouts were batched (packed.py)."""
        return {"id": self.id, "of": self.of, "cells": [c.dir.name for c in self.cells],
                "size": self.size, "exact": self.exact, "shared_base": self.shared_base,
                "batched": self.shared_base and not self.exact,
                "joint_updates": self.shared_base and not self.exact and self.joint,
                "kept_tokens": self.kept_tokens,
                "shared": {k: list(v) if isinstance(v, tuple) else v
                           for k, v in self.shared.items()}}


def check_size(size) -> None:
    if not isinstance(size, int) or isinstance(size, bool) or size < 1:
        raise ConfigError(f"hydra.launcher.size={size} is not allowed; the most cells a "
                          "pack holds: an integer >= 1 (default 8)")


def check_kept(kept) -> None:
    if kept is not None and (not isinstance(kept, int) or isinstance(kept, bool) or kept < 1):
        raise ConfigError(f"hydra.launcher.kept_tokens={kept} is not allowed; the most "
                          "positions of keys and values the pack's sampler keeps: an "
                          "integer >= 1, or null for no cap (default)")


def pack_key(cfg: DictConfig) -> tuple:
    out = []
    for key in SHARED:
        value = OmegaConf.select(cfg, key)
        if OmegaConf.is_config(value):
            value = tuple(OmegaConf.to_container(value))
        out.append(value)
    return tuple(out)


def check_cell(cfg: DictConfig, size, exact: bool = False) -> None:
    """A cell hydra/launcher=pack cannot pack: one line (ConfigError)."""
    check_size(size)
    if not OmegaConf.select(cfg, "learner.lora.enable"):
        raise ConfigError(
            "learner.lora.enable=false is not allowed with hydra/launcher=pack (this cell "
            "trains every weight; the cells of a pack share one base model and train only "
            "their own LoRA adapters): add learner.lora.enable=true, or run the grid with "
            "another launcher (hydra/launcher=basic)")
    spread = int(OmegaConf.select(cfg, "run.devices_per_cell") or 0)
    if spread:
        raise ConfigError(
            f"run.devices_per_cell={spread} is not allowed with hydra/launcher=pack (it "
            "gives parallel grid workers devices of their own; a pack's cells run in one "
            "process, packs one after another, on run.device): leave it 0")
    reason = shared_base_reason({k: OmegaConf.select(cfg, k) for k in SHARED}, exact)
    if reason:
        raise ConfigError(f"hydra/launcher=pack cannot hold this cell's adapters over one "
                          f"shared base: {reason}")


def plan_packs(cfgs: Sequence[DictConfig], size: int,
               exact: bool = False) -> list[tuple[list[int], str]]:
    """The packs of a grid's cells (their configs, in job order): each pack's cell
    indices and why it is not one with an earlier pack ("" for the first). A cell it
    cannot pack is a ConfigError (check_cell)."""
    for cfg in cfgs:
        check_cell(cfg, size, exact)
    groups: dict[tuple, list[int]] = {}
    for i, cfg in enumerate(cfgs):
        groups.setdefault(pack_key(cfg), []).append(i)
    first = next(iter(groups), None)
    packs: list[tuple[list[int], str]] = []
    for key, members in groups.items():
        head = len(packs) + 1
        for start in range(0, len(members), size):
            if not packs:
                why = ""
            elif start:
                why = f"the cells of pack {head} past hydra.launcher.size={size}"
            else:
                why = "apart from pack 1: " + differences(first, key)
            packs.append((members[start:start + size], why))
    return packs


def differences(a: tuple, b: tuple) -> str:
    """`learner.lora.rank 16 (pack 1: 8)`, for each SHARED key where b differs from a."""
    def show(v):
        return ",".join(v) if isinstance(v, tuple) else str(v)
    return ", ".join(f"{k} {show(y)} (pack 1: {show(x)})"
                     for k, x, y in zip(SHARED, a, b) if x != y)


def check_job(launcher: dict | None, cfg: DictConfig) -> None:
    """Preflight (ablate.apps.cli), each job of a -m grid as soon as it is composed: under
    hydra/launcher=pack, a cell it cannot pack is one line (ConfigError) before the
    job's other checks and before any directory exists."""
    if launcher and launcher.get("_target_") == TARGET:
        check_kept(launcher.get("kept_tokens"))
        check_cell(cfg, launcher.get("size"), bool(launcher.get("exact")))


def make_packs(cells: list[PackedCell], size: int, exact: bool,
               joint: bool | None = None) -> list[Pack]:
    plan = plan_packs([c.config for c in cells], size, bool(exact))
    packs = [Pack(id=n, of=len(plan), cells=[cells[i] for i in members],
                  shared=dict(zip(SHARED, pack_key(cells[members[0]].config))), why=why,
                  size=size, exact=bool(exact))
             for n, (members, why) in enumerate(plan, 1)]
    for pack in packs:
        pack.joint = joint_on(joint, pack.shared["run.device"])
    return packs


def joint_on(joint: bool | None, device: str) -> bool:
    """hydra.launcher.joint_updates: null means on a CUDA device only. On these CPUs a
    joint update measured no faster than the cells' own (compute-bound at a cell's
    batch) and held the joined rows' activations at once
    (benchmarks/results/bench_joint_update_tiny.json)."""
    return bool(joint) if joint is not None else str(device).startswith("cuda")


# ---------------------------------------------------------------------------------------
# the launcher (the grid's process)
# ---------------------------------------------------------------------------------------
def launch(launcher, job_overrides: Sequence[Sequence[str]],
           initial_job_idx: int) -> list[JobReturn]:
    """PackLauncher.launch: compose every job, plan and name the packs, then run each
    pack in a process of its own, one pack after another. A pack whose process died
    does not stop the others; then one line and exit status 1, which
    ablate.apps.cli.run_grid answers as it answers a dead joblib worker: the cells that
    had started are FAILED, and the grid is launched again for the rest."""
    setup_globals()
    config = launcher.config
    configure_log(config.hydra.hydra_logging, config.hydra.verbose)
    sweep_dir = Path(str(config.hydra.sweep.dir))
    sweep_dir.mkdir(parents=True, exist_ok=True)
    cells = [compose_cell(launcher, initial_job_idx + i, overrides, sweep_dir)
             for i, overrides in enumerate(job_overrides)]
    packs = make_packs(cells, launcher.size, launcher.exact,
                       getattr(launcher, "joint_updates", None))
    for pack in packs:
        pack.kept_tokens = getattr(launcher, "kept_tokens", None)
        log.info(pack.line())
    returns: dict[int, JobReturn] = {}
    died = []
    for pack in packs:
        got, code = run_in_process(launcher, pack, sweep_dir)
        if got is None:
            died.append(f"pack {pack.id} ({exit_text(code)})")
            continue
        returns.update((c.index, r) for c, r in zip(pack.cells, got))
    if died:
        log.error("the process of %s ended before its cells did (the OOM killer?); "
                  "re-run the same command to resume them", ", ".join(died))
        raise SystemExit(1)
    return [returns[c.index] for c in cells]


def exit_text(code: int) -> str:
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit status {code}"


def compose_cell(launcher, idx: int, overrides: Sequence[str], sweep_dir: Path) -> PackedCell:
    """The job's config as Hydra's BasicLauncher composes it (hydra/_internal/
    core_plugins/basic_launcher.py), its sweep directory fixed (a `${now:}` resolves
    once, here) and the cell's directory resolved as run_job resolves it."""
    config = launcher.hydra_context.config_loader.load_sweep_config(launcher.config,
                                                                    list(overrides))
    with open_dict(config):
        config.hydra.job.id = idx
        config.hydra.job.num = idx
        config.hydra.sweep.dir = str(sweep_dir)
    hc = HydraConfig.instance()
    before = hc.cfg
    try:
        hc.set_config(config)   # `${hydra:job.override_dirname}` reads it
        subdir = str(OmegaConf.select(config, "hydra.sweep.subdir"))
        name = str(config.hydra.job.override_dirname or "default")
    finally:
        hc.cfg = before
    return PackedCell(index=idx, overrides=list(overrides), config=config,
                      dir=sweep_dir / subdir, name=name)


def worker_env(pack: Pack) -> dict[str, str]:
    """The pack process's environment. Its cells (threads) take turns over one base, so
    they allocate from glibc's one main arena (MALLOC_ARENA_MAX=1, mallopt(3), read at
    the process's start): a thread's own arena keeps its freed memory apart from the
    other cells' (run.malloc_reuse keeps it mapped), and a pack of 8 tiny cells peaked
    at 1.80 GB against 0.95 GB in one arena (benchmarks/bench_pack.py)."""
    env = dict(os.environ)
    if shared_base_reason(pack.shared, pack.exact) is None:   # run_pack shares the base
        env.setdefault("MALLOC_ARENA_MAX", "1")
    return env


def run_in_process(launcher, pack: Pack, sweep_dir: Path) -> tuple[list | None, int]:
    """(the pack's JobReturns, 0), or (None, exit code) when its process died. The job
    goes to the process as hydra/launcher=joblib ships one (cloudpickle: the Hydra
    context, the task function and Hydra's singletons)."""
    base = sweep_dir / f".pack-{os.getpid()}-{pack.id}"
    job, out = base.with_suffix(".job"), base.with_suffix(".out")
    job.write_bytes(cloudpickle.dumps({
        "hydra_context": launcher.hydra_context, "task_function": launcher.task_function,
        "singletons": Singleton.get_state(), "pack": pack,
        "logging": (launcher.config.hydra.hydra_logging, launcher.config.hydra.verbose)}))
    try:
        code = subprocess.run([sys.executable, "-m", "ablate.apps.pack_worker", str(job),
                               str(out)], env=worker_env(pack)).returncode
        if code != 0 or not out.exists():
            return None, code or 1
        return cloudpickle.loads(out.read_bytes()), 0
    finally:
        job.unlink(missing_ok=True)
        out.unlink(missing_ok=True)


# ---------------------------------------------------------------------------------------
# the pack's process
# ---------------------------------------------------------------------------------------
def run_pack(pack: Pack, run_alone: Callable[[PackedCell], JobReturn]) -> list[JobReturn]:
    """Every cell of the pack, in its order; one JobReturn each, each cell writing its
    own directory and rows, a failing one ending FAILED alone. The cells are all alive
    at once over one base model, taking turns step by step (ablate/apps/pack_turns.py;
    preflight refused a cell whose backends cannot share the base: check_cell).
    environment.json records the pack (PACK_ENV)."""
    pack.shared_base = shared_base_reason(pack.shared, pack.exact) is None   # else refused

    def job(cell: PackedCell) -> Callable[[], JobReturn]:
        def run() -> JobReturn:
            os.environ[PACK_ENV] = json.dumps(pack.record())
            try:
                return run_alone(cell)
            finally:
                os.environ.pop(PACK_ENV, None)
        return run
    if not pack.shared_base:    # only a launcher driven past preflight gets here
        return [job(cell)() for cell in pack.cells]
    with contextlib.ExitStack() as stack:
        stack.enter_context(shared_bases())
        engine = joint = None
        if not pack.exact:
            engine = stack.enter_context(batched(len(pack.cells), pack.kept_tokens))
        if not pack.exact and pack.joint:
            joint = stack.enter_context(joint_updates())
        out, switches = take_turns([job(cell) for cell in pack.cells])
    log.info("one base model for the %d cells of pack %d: the turn passed %d times%s",
             len(pack.cells), pack.id, switches,
             (f"; the cells' {engine.requests} sampler calls ran as {engine.batches} "
              "batched calls" if engine is not None else "")
             + (f", their {joint.updates} updates in {joint.passes} joint ones "
                f"(the rest alone)"
                if joint is not None else ""))
    return out


def shared_base_reason(shared: dict, exact: bool = False) -> str | None:
    """Why a pack's cells cannot share one base model (None: they can). The learner must
    never write the base in place (it declares "shared_base"); the learners cast their
    model to float32 master weights in place, so the base must already be float32. The
    sampler: batched, one for the pack holding every cell's adapter ("pack_rows"); exact,
    one per cell over the in-memory base ("shared_base"), never an engine per cell."""
    learner, sampler = shared["learner.name"], shared["sampler.name"]
    if not LEARNERS.declared(learner).can("shared_base"):
        return (f"learner={learner} does not declare shared_base (ZeRO-3 partitions the "
                f"base in place); {_who(LEARNERS, 'shared_base', 'learner')} shares it")
    need = "shared_base" if exact else "pack_rows"
    if not SAMPLERS.declared(sampler).can(need):
        what = ("one per cell over the shared base (hydra.launcher.exact=true)" if exact
                else "one engine holding every cell's adapter (a batched pack)")
        return (f"sampler={sampler} does not declare {need}: {what}; "
                f"{_who(SAMPLERS, need, 'sampler')} can")
    if shared["model.dtype"] != "float32":
        return (f"model.dtype={shared['model.dtype']}: the learner would cast the shared "
                "base to float32 in place, under every cell's sampler")
    return None


def _who(registry, capability: str, key: str) -> str:
    """`sampler=hf or sampler=vllm`: the registered names that declare the capability."""
    return " or ".join(f"{key}={n}" for n in registry.declaring(capability)) or f"no {key}"


def job_runner(hydra_context, task_function, logging_cfg) -> Callable[[PackedCell], JobReturn]:
    """run_alone: one cell through Hydra's run_job and the task function, as Hydra's
    BasicLauncher runs each job (its .hydra/ files, its log, its JobReturn)."""
    def run_alone(cell: PackedCell) -> JobReturn:
        ret = run_job(hydra_context=hydra_context, task_function=task_function,
                      config=cell.config, job_dir_key="hydra.sweep.dir",
                      job_subdir_key="hydra.sweep.subdir")
        configure_log(*logging_cfg)
        return ret
    return run_alone
