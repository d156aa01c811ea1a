"""Optuna searches over cell configurations: `python -m ablate.search SPACE.yaml [overrides]`.

Optuna's own ask/tell API (not the Hydra sweeper plugin, which pins optuna < 3 and cannot
prune) with an RDB storage: SQLite by default, so a search resumes after a crash, and a
database URL lets several machines share one study. Each trial is a real cell; its
periodic evaluations feed the pruner. A trial's cell directory is named by a hash of its
parameters, so a trial interrupted mid-cell is re-asked with the same parameters and its
cell resumes from the last checkpoint.

A search space file (see sweeps/):

    study_name: dapo_clip
    direction: maximize
    metric: eval/accuracy            # a key of the evaluation summary
    base_overrides: ["+algo=dapo", "trainer.max_steps=20"]
    params:
      algo.eps_high: {type: float, low: 0.2, high: 0.35}
      trainer.lr: {type: float, low: 1.0e-5, high: 1.0e-3, log: true}
      algo.entropy_coef: {type: categorical, choices: [0.0, 0.001]}
    sampler: {type: tpe, seed: 0}
    pruner: {type: median, n_startup_trials: 2, n_warmup_steps: 1}
"""
from __future__ import annotations

import argparse
import hashlib
import json
import logging
import os
import socket
import sys
import time
from datetime import datetime, timedelta
from pathlib import Path
from typing import Callable

import optuna
import yaml
from optuna.trial import TrialState

from ablate.apps.cli import CELL_ERRORS, compose_config, normalise_overrides, one_line
from ablate.core.locks import process_alive
from ablate.loop.config import ConfigError, validate
from ablate.loop.outputs import CellBusy
from ablate.loop import cell as loop_cell   # run_cell read when called (tests replace it)

log = logging.getLogger("ablate.apps.search")

DISTRIBUTIONS = {
    "float": lambda p: optuna.distributions.FloatDistribution(
        p["low"], p["high"], log=p.get("log", False), step=p.get("step")),
    "int": lambda p: optuna.distributions.IntDistribution(
        p["low"], p["high"], log=p.get("log", False), step=p.get("step", 1)),
    "categorical": lambda p: optuna.distributions.CategoricalDistribution(p["choices"]),
}
PRUNERS = {
    "median": lambda p: optuna.pruners.MedianPruner(
        n_startup_trials=p.get("n_startup_trials", 2), n_warmup_steps=p.get("n_warmup_steps", 0)),
    "percentile": lambda p: optuna.pruners.PercentilePruner(
        p.get("percentile", 50.0), n_startup_trials=p.get("n_startup_trials", 2),
        n_warmup_steps=p.get("n_warmup_steps", 0)),
    "hyperband": lambda p: optuna.pruners.HyperbandPruner(),
    "none": lambda p: optuna.pruners.NopPruner(),
}
SAMPLERS = {
    "tpe": lambda p: optuna.samplers.TPESampler(seed=p.get("seed")),
    "random": lambda p: optuna.samplers.RandomSampler(seed=p.get("seed")),
}


class SearchSpaceError(ValueError):
    pass


def load_space(path: str | Path) -> dict:
    path = Path(path)
    if not path.is_file():
        raise SearchSpaceError(f"search space file not found: {path}")
    space = yaml.safe_load(path.read_text()) or {}
    for key in ("study_name", "metric", "params"):
        if key not in space:
            raise SearchSpaceError(f"{path}: missing key '{key}'")
    if space.get("direction", "maximize") not in ("maximize", "minimize"):
        raise SearchSpaceError(f"{path}: direction must be maximize or minimize")
    space["distributions"] = {}
    for name, spec in space["params"].items():
        kind = spec.get("type")
        if kind not in DISTRIBUTIONS:
            raise SearchSpaceError(f"{path}: params.{name}.type={kind!r}; "
                                   f"choose one of {sorted(DISTRIBUTIONS)}")
        space["distributions"][name] = DISTRIBUTIONS[kind](spec)
    for key, table in (("pruner", PRUNERS), ("sampler", SAMPLERS)):
        kind = (space.get(key) or {}).get("type", "median" if key == "pruner" else "tpe")
        if kind not in table:
            raise SearchSpaceError(f"{path}: {key}.type={kind!r}; choose one of {sorted(table)}")
    return space


def trial_overrides(space: dict, params: dict, extra: list[str]) -> list[str]:
    """The Hydra override list of one trial (also the form the best config is written in)."""
    return normalise_overrides(list(space.get("base_overrides", [])) + list(extra)
                               + [f"{k}={v}" for k, v in sorted(params.items())])


def params_key(params: dict) -> str:
    return hashlib.sha256(json.dumps(params, sort_keys=True).encode()).hexdigest()[:12]


def run_search(space: dict, *, n_trials: int, storage: str, out_dir: Path,
               extra_overrides: list[str] = (), run_fn: Callable | None = None) -> optuna.Study:
    """Run trials until the study holds `n_trials` finished (complete or pruned) trials."""

    run_fn = run_fn or loop_cell.run_cell
    out_dir.mkdir(parents=True, exist_ok=True)
    pruner = PRUNERS[(space.get("pruner") or {}).get("type", "median")](space.get("pruner") or {})
    study = optuna.create_study(study_name=space["study_name"], storage=storage,
                                direction=space.get("direction", "maximize"),
                                pruner=pruner, load_if_exists=True)
    # a seeded sampler restarted on a resumed study would propose the same points again:
    # offset its seed by the trials the study already holds
    sampler_spec = dict(space.get("sampler") or {})
    if sampler_spec.get("seed") is not None:
        sampler_spec["seed"] = int(sampler_spec["seed"]) + len(study.trials)
    study.sampler = SAMPLERS[sampler_spec.get("type", "tpe")](sampler_spec)
    requeue_dead_trials(study)
    metric = space["metric"]

    def finished() -> int:
        return len(study.get_trials(deepcopy=False,
                                    states=(TrialState.COMPLETE, TrialState.PRUNED)))

    while finished() < n_trials:
        trial = study.ask(space["distributions"])
        claim(trial)
        overrides = trial_overrides(space, trial.params, list(extra_overrides))
        cfg = compose_config(overrides)
        validate(cfg)
        cell_dir = out_dir / f"trial_{params_key(trial.params)}"
        trial.set_user_attr("overrides", overrides)
        trial.set_user_attr("cell_dir", str(cell_dir))

        def on_eval(step: int, summary: dict, trial=trial) -> None:
            if step == 0 or metric not in summary:
                return
            trial.report(float(summary[metric]), step)
            if trial.should_prune():
                raise optuna.TrialPruned(f"pruned at step {step}")

        try:
            summary = run_fn(cfg, cell_dir, on_eval=on_eval)
        except optuna.TrialPruned:
            study.tell(trial, state=TrialState.PRUNED)
            log.info("trial %d pruned", trial.number)
            continue
        except CellBusy as exc:   # another search process runs these very parameters
            study.tell(trial, state=TrialState.FAIL)
            log.warning("trial %d: %s; asking for other parameters", trial.number, exc)
            time.sleep(1.0)
            continue
        value = (summary.get("final_eval") or {}).get(metric)
        if value is None:
            study.tell(trial, state=TrialState.FAIL)
            raise SearchSpaceError(f"metric {metric!r} not in the cell's final evaluation "
                                   f"(keys: {sorted((summary.get('final_eval') or {}))})")
        study.tell(trial, float(value))
        log.info("trial %d: %s = %.4f", trial.number, metric, value)

    write_best(study, space, out_dir, list(extra_overrides))
    return study


# a RUNNING trial of this host is dead when its process is; one without a claim (its
# process died between ask and claim, or an older version) after this long
UNCLAIMED_GRACE = timedelta(minutes=2)


def claim(trial: optuna.Trial) -> None:
    """Mark a trial as this process's (host, pid): another search process sharing the
    study then knows whether the trial is live."""
    trial.set_user_attr("host", socket.gethostname())
    trial.set_user_attr("pid", os.getpid())


def trial_is_dead(t: optuna.trial.FrozenTrial) -> bool:
    """A RUNNING trial whose process is gone: of this host and its process not running
    (this very process runs no trial while it starts a search). A trial of another host
    is live as far as we can tell: only a search on that host re-queues it."""
    host, pid = t.user_attrs.get("host"), t.user_attrs.get("pid")
    if host is None or pid is None:
        start = t.datetime_start or datetime.now()
        return datetime.now() - start > UNCLAIMED_GRACE
    if host != socket.gethostname():
        return False
    return int(pid) == os.getpid() or not process_alive(int(pid))


def requeue_dead_trials(study: optuna.Study) -> None:
    """Trials left RUNNING by a crashed process: asked again with the same parameters
    (their cell directory resumes from its checkpoint), then marked failed - in that
    order, so a kill between the two loses no trial; a live trial of another process
    sharing the study is left alone."""
    waiting = {params_key(t.system_attrs.get("fixed_params", t.params)) for t in
               study.get_trials(deepcopy=False, states=(TrialState.WAITING,))}
    for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        if not trial_is_dead(t):
            log.info("trial %d runs in process %s on %s: left to it", t.number,
                     t.user_attrs.get("pid"), t.user_attrs.get("host"))
            continue
        if params_key(t.params) not in waiting:
            study.enqueue_trial(t.params, skip_if_exists=False)
            waiting.add(params_key(t.params))
        study.tell(t.number, state=TrialState.FAIL)
        log.info("re-queued interrupted trial %d", t.number)


def write_best(study: optuna.Study, space: dict, out_dir: Path, extra: list[str]) -> Path | None:
    done = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
    if not done:
        return None
    best = study.best_trial
    overrides = trial_overrides(space, best.params, extra)
    path = out_dir / "best_overrides.txt"
    path.write_text(" ".join(overrides) + "\n")
    (out_dir / "best.json").write_text(json.dumps(
        {"trial": best.number, "value": best.value, "params": best.params,
         "overrides": overrides}, indent=2))
    return path


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m ablate.search", description=__doc__.split("\n")[0])
    ap.add_argument("space", help="search space yaml (see sweeps/)")
    ap.add_argument("overrides", nargs="*", help="extra Hydra overrides for every trial")
    ap.add_argument("--n-trials", type=int, default=20)
    ap.add_argument("--storage", default=None,
                    help="Optuna RDB URL (default sqlite:///<out>/study.db)")
    ap.add_argument("--out", default=None, help="output directory (default outputs/search/<study>)")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="[%(asctime)s %(levelname)s] %(message)s")
    try:
        space = load_space(args.space)
        out = Path(args.out or f"outputs/search/{space['study_name']}")
        out.mkdir(parents=True, exist_ok=True)
        storage = args.storage or f"sqlite:///{(out / 'study.db').resolve()}"
        # fail before any work on a bad base config
        validate(compose_config(trial_overrides(space, {}, args.overrides)))
    except (SearchSpaceError, ConfigError) as exc:
        print(f"ablate.search: error: {exc}", file=sys.stderr)
        sys.exit(2)
    try:
        study = run_search(space, n_trials=args.n_trials, storage=storage, out_dir=out,
                           extra_overrides=args.overrides)
    except (SearchSpaceError, *CELL_ERRORS) as exc:
        print(f"ablate.search: error: {one_line(exc)}", file=sys.stderr)
        sys.exit(2)
    best = out / "best_overrides.txt"
    if best.exists():
        print(f"best value {study.best_value:.4f}; overrides in {best}:\n{best.read_text()}")


if __name__ == "__main__":
    main()
