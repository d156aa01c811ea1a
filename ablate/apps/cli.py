"""`python -m ablate`: the Hydra app that runs one cell, a grid (-m) or a preset.

Before Hydra runs anything, every job of the command line (each cell of a -m grid) is
composed in-process and validated, so bad input fails before any work starts, with the
key and the allowed values named and no traceback.
"""
from __future__ import annotations

import logging
import os
import re
import sys
import threading
import time
import traceback
from pathlib import Path

import hydra
from hydra.core.hydra_config import HydraConfig
from hydra.errors import ConfigCompositionException
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf, open_dict

from ablate.core.errors import OutputWriteError
from ablate.learners import CheckpointError
from ablate.envs import config_keys, env_class, option_keys
from ablate.loop.config import BACKENDS, ConfigError, register
from ablate.loop.distributed import RankDied
from ablate.loop.outputs import (COMPLETE, FAILED, CellBusy, CellDir, busy_message, has_work,
                                 lock_holder)
from ablate.loop.resume import check_resume
from ablate.loop.ranks import CellOutcome
from ablate.apps.devices import assign as assign_devices, export_submitit_ranks
from ablate.core.dist import env_world_size, is_writer
from ablate.core.threads import available_cpus, grid_threads
from ablate.apps.argv import (  # noqa: F401  (re-exported: tests and apps import them here)
    MOVED, compose_config, conf_dir, expand_jobs, flags_first,
    import_cli_plugins, normalise_overrides, _split_cli, align_sweep_keys)
from ablate.apps.pack import check_job as check_pack_job
from ablate.apps.preflight import (check_free_space, check_output_dir, preflight as check_cfg,
                                    writable_dir)
from ablate.loop import cell as loop_cell   # run_cell read when called (tests replace it)

log = logging.getLogger("ablate")
FAILED_CELLS: list[str] = []   # cells of this -m grid that raised (the others went on)
GRID_PID = "ABLATE_GRID_PID"   # the command's process id, inherited by launcher workers
# every worker of any launcher appends "start|ok|failed|busy\t<cell dir>" lines there
GRID_REPORT = "ABLATE_GRID_REPORT"
PLANNED: dict = {}             # what preflight learnt of a -m grid: jobs, sweep dir,
                               # the complete cells (dir, config) it found
# a cell's known failure modes: one line for a single run, no traceback
CELL_ERRORS = (ConfigError, CheckpointError, OutputWriteError, RankDied)
_watching: list[threading.Thread] = []

def preflight(args: list[str]) -> int:
    """Compose and check every job before Hydra makes any directory; print one line
    naming the key (or file:line) and return 2 on bad input."""
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    PLANNED.clear()
    try:
        overrides, multirun, skip = _split_cli(args)
        check_moved(overrides)
        if skip:
            return 0
        jobs = expand_jobs(overrides, multirun)
        PLANNED.update(jobs=len(jobs), sweep_dir=None, complete=[])
        checked_data: set[str] = set()
        for job in jobs:
            check_job(job, multirun, checked_data)
        check_complete_cells(multirun)
    except (ConfigError, HydraException, OmegaConfBaseException, FileNotFoundError,
            ValueError) as exc:
        print(f"ablate: error: {one_line(exc)}", file=sys.stderr)
        return 2
    return 0


def check_moved(overrides: list[str]) -> None:
    """An override of a key that moved (MOVED) is one line naming where it went."""
    for arg in overrides:
        head = arg.split("=", 1)[0].lstrip("+~").split(".")[0]
        if "=" in arg and head in MOVED:
            raise ConfigError(f"{arg}: {MOVED[head]}")


def check_job(job: list[str], multirun: bool, checked_data: set[str]) -> None:
    """Every check of one job; the data of an environment is checked once per command.
    A complete cell writes nothing (it is skipped): its directory may be read-only (an
    archived sweep), so neither the writability probe nor the free space is asked of it."""
    cfg = compose_job(job)
    key = "hydra.sweep.dir" if multirun else "hydra.run.dir"
    out_dir = OmegaConf.select(cfg, key)
    cell = job_cell_dir(cfg, multirun)
    complete = cell is not None and (cell / COMPLETE).exists()
    if not complete:
        check_output_dir(key, str(out_dir))
    if multirun and PLANNED.get("sweep_dir") is None:
        PLANNED["sweep_dir"] = str(OmegaConf.select(cfg, key))
        PLANNED["launcher"] = OmegaConf.to_container(cfg.hydra.launcher)
    with open_dict(cfg):
        cfg.pop("hydra")
    if multirun:   # hydra/launcher=pack: a cell it cannot pack (docs/packs.md)
        check_pack_job(PLANNED.get("launcher"), cfg)
    data_key = OmegaConf.to_yaml(cfg.env) + str(cfg.model) + str(
        cfg.harness.max_tokens_per_episode)
    check_cfg(cfg, data=data_key not in checked_data)
    checked_data.add(data_key)
    if complete:
        PLANNED["complete"].append((cell, cfg))
    else:
        check_resumable(cell, cfg, busy_probe=not multirun)
        # a grid's cell is credited with what its own directory already holds (issue 64)
        check_free_space(key, str(out_dir), cfg, cell=None if cell is None else str(cell))


def check_resumable(cell: Path | None, cfg: DictConfig, busy_probe: bool) -> None:
    """An existing cell that run_cell would refuse (it was started with another config or
    rank count; another live process runs it) is refused here, before Hydra writes the
    command's .hydra/config.yaml and overrides.yaml into it (issue 64 item 10). The busy
    probe is a single run's: a grid goes on past a busy cell and names it at the end
    (_summarise); under a launcher's ranks, rank 0 may hold the lock already."""
    if cell is None or not cell.is_dir():
        return
    world = env_world_size()
    holder = lock_holder(cell) if busy_probe and world <= 1 else None
    if holder is not None and holder != os.getpid():
        raise ConfigError(busy_message(cell, holder))
    if world > 1:            # run_cell sets it from the launcher's ranks
        cfg = cfg.copy()
        cfg.run.world_size = world
    check_resume(cell, cfg, has_work(cell))


def job_cell_dir(cfg: DictConfig, multirun: bool) -> Path | None:
    """The directory Hydra gives this job's cell: hydra.run.dir, or the sweep dir and its
    subdir (resolved as Hydra resolves it, through its job config); None if unknown."""
    if not multirun:
        return Path(os.path.expanduser(str(cfg.hydra.run.dir)))
    hc = HydraConfig.instance()
    before = hc.cfg
    try:
        hc.set_config(cfg)   # `${hydra:job.override_dirname}` reads it
        subdir = OmegaConf.select(cfg, "hydra.sweep.subdir", throw_on_resolution_failure=True)
    except Exception:   # noqa: BLE001 - a subdir unknown before the launch: probe as usual
        return None
    finally:
        hc.cfg = before
    return Path(os.path.expanduser(str(cfg.hydra.sweep.dir))) / str(subdir)


def check_complete_cells(multirun: bool) -> None:
    """A complete cell in a read-only directory: Hydra would write its .hydra/ and log
    there, so such a command is answered here (main: "complete; skipping") when every
    cell of it is complete; beside cells still to run, the directory must be writable."""
    done = PLANNED["complete"]
    read_only = [c for c, _ in done if writable_dir(c)]
    PLANNED["archived"] = bool(read_only) and len(done) == PLANNED["jobs"]
    if read_only and not PLANNED["archived"]:
        check_output_dir("hydra.sweep.dir" if multirun else "hydra.run.dir",
                         str(read_only[0]))


def skip_complete_cells() -> None:
    """Every cell of the command is complete and one is read-only: each is replayed by
    run_cell ("complete; skipping", or the config change it ignores) without Hydra."""

    if not logging.getLogger().handlers:
        logging.basicConfig(level=logging.INFO,
                            format="[%(asctime)s %(levelname)s] %(message)s")
    for cell, cfg in PLANNED["complete"]:
        loop_cell.run_cell(cfg, cell)


def compose_job(job: list[str]) -> DictConfig:
    """compose_config; an `env.<key>` the environment's schema lacks is named with the
    keys it allows (Hydra's own message names neither the environment nor them)."""
    try:
        return compose_config(job, hydra_node=True)
    except ConfigCompositionException as exc:
        key = str(getattr(exc.__cause__, "full_key", "") or "")
        rest = [o for o in job if o.split("=", 1)[0].lstrip("+~") != key]
        if key.split(".")[0] in BACKENDS:
            raise ConfigError(backend_key_error(key, compose_config(rest))) from None
        if not key.startswith("env."):
            raise
        env = compose_config(rest).env
        cls = env_class(env)
        raise ConfigError(f"env={env.name} has no key {key}; allowed: "
                          f"{', '.join(config_keys(cls))}"
                          + (f" and env.options.<{'|'.join(option_keys(cls))}>"
                             if option_keys(cls) else "")) from None


def backend_key_error(key: str, cfg: DictConfig) -> str:
    """`sampler.urls=...` on a cell whose sampler has no such key: the backends that own
    it (the keys every backend had on one flat schema moved into their backend's)."""
    group, _, leaf = key.partition(".")
    registry, name = BACKENDS[group], cfg[group].name
    owners = registry.owners(leaf.split(".")[0])
    if not owners:
        return (f"{group}={name} has no key {key}; allowed: "
                f"{', '.join(sorted(registry.schema_keys(name)))}")
    return (f"{key} is a key of {group}={' or '.join(owners)}, not of {group}={name}: "
            f"add {group}={owners[0]} (each backend's keys are its own, "
            "docs/configuration.md)")


# lines of Hydra / OmegaConf messages that repeat what the first line says
_NOISE = ("full_key:", "object_type=", "reference_type=", "Set the environment variable",
          "Config search path", "See https://hydra.cc")


def one_line(exc: BaseException) -> str:
    """The exception's text plus its causes' (Hydra wraps the informative one), as one
    line."""
    parts: list[str] = []
    if isinstance(getattr(exc, "override", None), str):   # Hydra's OverrideParseException
        parts.append(f"cannot parse override {exc.override!r}")
    while exc is not None:
        text = _flatten(str(exc))
        if text and not any(text in p for p in parts):
            parts.append(text)
        exc = exc.__cause__
    return " | ".join(parts) or "invalid configuration"


def _flatten(message: str) -> str:
    """Noise lines dropped; indented lines (Hydra's option lists) joined to the line
    above with commas; the rest joined with "; "."""
    out: list[str] = []
    skipping = False
    for raw in message.splitlines():
        line = raw.strip()
        indented = raw[:1] in (" ", "\t")
        if not line or (skipping and indented):
            continue
        skipping = line.startswith(_NOISE)
        if skipping:
            continue
        if out and indented:
            out[-1] += (" " if out[-1].endswith(":") else ", ") + line
        else:
            out.append(line)
    return "; ".join(out)


register()


@hydra.main(config_path=str(conf_dir()), config_name="config", version_base="1.3")
def _hydra_main(cfg: DictConfig) -> float | None:
    hc = HydraConfig.get()
    out_dir = hc.runtime.output_dir
    export_submitit_ranks()   # a multi-task submitit job: one rank per task
    if hc.mode != RunMode.MULTIRUN:
        try:
            summary = loop_cell.run_cell(cfg, out_dir)
        except (CellBusy, CellOutcome, *CELL_ERRORS) as e:
            print(f"ablate: error: {one_line(e)}", file=sys.stderr)
            sys.exit(2)
    else:
        grid = os.environ.get(GRID_PID)
        if not _watching and grid == str(os.getppid()):   # a worker process of the grid's
            _watching.append(exit_with_parent(int(grid)))
        if env_world_size() == 1:   # a multi-rank cell's ranks use GPU LOCAL_RANK
            assign_devices(int(hc.job.num), int(cfg.run.devices_per_cell))   # before CUDA
        _share_cores(cfg, hc)
        summary = _grid_cell(cfg, out_dir, hc.job.override_dirname or "default",
                             loop_cell.run_cell)
    return summary.get("final_accuracy") if summary else None


def _share_cores(cfg: DictConfig, hc) -> None:
    """`run.num_threads=auto` in a grid whose launcher runs cells side by side
    (joblib's n_jobs; -1 = one per core): each cell gets its share of the cores."""
    n = hc.launcher.get("n_jobs") if "launcher" in hc else None
    if n is None:
        return
    cpus = available_cpus()
    parallel = cpus + 1 + int(n) if int(n) < 0 else int(n)   # joblib's negative n_jobs
    try:
        threads = grid_threads(cfg.run.num_threads, cpus=cpus, parallel_cells=parallel)
    except ValueError:      # the cell's validation names the bad value
        return
    with open_dict(cfg):
        cfg.run.num_threads = str(threads)


def _grid_cell(cfg: DictConfig, out_dir: str, name: str, run_cell) -> dict | None:
    """One cell of a -m grid, in whichever process the launcher runs it; its outcome is
    reported to the grid's process through the GRID_REPORT file."""
    before = grid_report()   # a relaunch (after a worker died) redoes no cell that ended
    for state in ("dead", "failed", "busy"):
        if out_dir in before.get(state, ()):
            _report(state, out_dir)
            return None
    _report("start", out_dir)
    try:
        summary = run_cell(cfg, out_dir)
    except CellBusy as e:    # its files are its runner's: no FAILED marker
        FAILED_CELLS.append(out_dir)
        _report("busy", out_dir)
        log.error("cell %s skipped (the grid goes on): %s", name, e)
        return None
    except Exception as e:   # one bad cell must not stop a grid; KeyboardInterrupt does
        try:
            CellDir(out_dir, writer=is_writer()).mark_failed(one_line(e), traceback.format_exc())
        except OSError as why:   # a read-only or full disk: the log still says it
            log.error("cannot write %s/FAILED: %s", out_dir, why)
        FAILED_CELLS.append(out_dir)
        _report("failed", out_dir)
        log.error("cell %s FAILED (the grid goes on; see %s/FAILED): %s", name, out_dir,
                  one_line(e))
        return None
    _report("ok", out_dir)
    return summary


def _report(state: str, out_dir: str) -> None:
    path = os.environ.get(GRID_REPORT)
    if path and is_writer():   # a multi-rank cell reports once, from rank 0
        try:
            with open(path, "a", encoding="utf-8") as fh:   # one short line: atomic append
                fh.write(f"{state}\t{out_dir}\n")
        except OSError as why:
            log.error("cannot report cell %s to the grid (%s): %s", out_dir, path, why)


def grid_report() -> dict[str, set[str]]:
    """{state: cell dirs} from the report file; a cell's last word counts; "dead" holds
    cells whose worker was found dead after a launch."""
    path = os.environ.get(GRID_REPORT)
    last: dict[str, str] = {}
    if path and os.path.exists(path):
        for line in open(path, encoding="utf-8").read().splitlines():
            state, _, cell = line.partition("\t")
            if cell:
                last[cell] = state if last.get(cell) != "dead" else "dead"
    out: dict[str, set[str]] = {}
    for cell, state in last.items():
        out.setdefault(state, set()).add(cell)
    return out


def exit_with_parent(parent: int, every_s: float = 2.0) -> threading.Thread:
    """In a launcher's worker (joblib): exit once the grid's process `parent` is no
    longer this one's parent. A killed grid otherwise leaves its workers running cells,
    which a re-run could only refuse (CellBusy); killed here, each cell resumes from its
    checkpoint."""
    def watch():
        while os.getppid() == parent:
            time.sleep(every_s)
        log.error("the grid's process %d is gone: this worker (%d) stops", parent,
                  os.getpid())
        logging.shutdown()
        os._exit(1)
    thread = threading.Thread(target=watch, name="ablate-grid-watch", daemon=True)
    thread.start()
    return thread


def launcher_args(args: list[str]) -> list[str]:
    """The command line without the `--local_rank=N` the `deepspeed` launcher appends
    (its LOCAL_RANK variable says the same; docs/distributed.md)."""
    return [a for a in args if not re.fullmatch(r"--local[_-]rank=\d+", a)]


def checked(argv: list[str] | None = None) -> tuple[list[str], int]:
    """The command line normalised, its plugins imported and every job preflighted:
    (args, 0), or (args, 2) after the one-line error (python -m ablate and
    python -m ablate.apps.check)."""
    args = launcher_args(list(sys.argv[1:] if argv is None else argv))
    args = flags_first(normalise_overrides(args))
    try:
        import_cli_plugins(args)
        register()   # the plugins' backends' schemas join the ConfigStore
        args = align_sweep_keys(args)
    except ConfigError as exc:
        print(f"ablate: error: {one_line(exc)}", file=sys.stderr)
        return args, 2
    return args, preflight(args)


def main(argv: list[str] | None = None) -> None:
    args, code = checked(argv)
    if code:
        sys.exit(code)
    if PLANNED.get("archived"):
        skip_complete_cells()
        return
    os.environ[GRID_PID] = str(os.getpid())
    if PLANNED.get("sweep_dir") is None or not _split_cli(args)[1]:
        sys.argv = [sys.argv[0]] + args
        _hydra_main()
        return
    code = run_grid(args)
    if code:
        sys.exit(code)


def run_grid(args: list[str], relaunches: int = 3) -> int:
    """A -m grid under any launcher: the sweep directory pinned (so a relaunch reuses
    it); a worker that died (killed, e.g. by the OOM killer, which stops a joblib pool)
    fails its cell and the grid is launched again for the others; then "N of M cells
    failed/busy" and exit status 1 when any did."""
    sweep = Path(PLANNED["sweep_dir"])
    args = [a for a in args if not a.startswith("hydra.sweep.dir=")] + \
        [f"hydra.sweep.dir={sweep}"]
    sweep.mkdir(parents=True, exist_ok=True)
    report = sweep / f".grid-{os.getpid()}.tsv"
    report.unlink(missing_ok=True)
    os.environ[GRID_REPORT] = str(report)
    since = time.time() - 1.0    # 1 s of slack for coarse file-system timestamps
    try:
        for _ in range(relaunches + 1):
            sys.argv = [sys.argv[0]] + args
            try:
                _hydra_main()
            except SystemExit as exc:
                if exc.code not in (0, None) and not _mark_dead(report, since):
                    raise
                continue
            if not _mark_dead(report, since):
                break
        return _summarise(grid_report(), PLANNED.get("jobs") or 0)
    finally:
        os.environ.pop(GRID_REPORT, None)
        report.unlink(missing_ok=True)


def _mark_dead(report: Path, since: float) -> bool:
    """Cells started but never finished: their worker died. FAILED, skipped next launch.
    A cell that wrote its own FAILED during this grid keeps it: its worker was stopped
    (a dying joblib pool stops them all) after the error, before reporting it."""
    dead = grid_report().get("start", set())
    for cell in sorted(dead):
        own = Path(cell, FAILED)
        state = "failed" if own.exists() and own.stat().st_mtime >= since else "dead"
        if state == "dead":
            CellDir(cell).mark_failed("its worker process died (killed, e.g. by the OOM "
                                      "killer?); re-run the grid to retry it", "")
        log.error("cell %s FAILED: its worker process died; the grid goes on", cell)
        with report.open("a", encoding="utf-8") as fh:
            fh.write(f"{state}\t{cell}\n")
    return bool(dead)


def _summarise(states: dict[str, set[str]], planned: int) -> int:
    failed = sorted(states.get("failed", set()) | states.get("dead", set()))
    busy = sorted(states.get("busy", set()))
    total = max(planned, sum(len(v) for v in states.values()))
    if not failed and not busy:
        return 0
    print(f"ablate: {len(failed)} of {total} cells failed, {len(busy)} busy (re-run the "
          f"same command to retry them): " + ", ".join(failed + busy), file=sys.stderr)
    return 1
