"""What a resumed (or re-run complete) cell is checked against: the config it was started
with. A cell is one configuration; resuming it with another one would mix rows of two
runs under the first one's name, with the optimizer state of the first.

`config_changes(stored, cfg)` lists the keys whose value differs, except the keys that
cannot change a result (ALLOW_CHANGE: display, logging, threads (the update's included), cache directories,
the email judge's transport settings, trainer.max_steps to extend a cell).
`run.allow_config_change=true` lets a resume go on anyway; the change is then recorded in <cell>/config_changes.jsonl and in the next
metrics row (`resume/config_changes`)."""
from __future__ import annotations

import json
import math
from pathlib import Path

import yaml
from omegaconf import DictConfig, OmegaConf

from ablate.core.errors import ConfigError
from ablate.learners import LEARNERS
from ablate.samplers import SAMPLERS

# keys (or key prefixes ending in ".") whose value a resume may change freely
ALLOW_CHANGE = ("run.quiet", "run.wandb_mode", "run.wandb_project", "run.num_threads",
                "run.malloc_reuse",
                "run.num_trajectories", "run.allow_config_change", "env.cache_dir",
                "env.judge.cache_dir", "env.judge.api_key_env", "env.judge.timeout_s",
                "env.judge.max_retries",
                # every random choice is a function of (seed, step, round) and no schedule
                # reads it: a longer run repeats a shorter one's steps (extending a cell)
                "trainer.max_steps",
                # ranks: checked on their own (check_world_size); the timeout and the
                # grid's device assignment change no result
                "run.world_size", "run.dist_timeout_s", "run.devices_per_cell",
                # the update's torch threads: the cell resolves 0 to its cores beside vLLM
                # or offload (ablate/core/threads.py); threads change no result
                # (tests/learners/test_update_threads.py)
                "learner.update_threads")
CHANGES_FILE = "config_changes.jsonl"
# keys (or prefixes ending in ".") a later version renamed: a cell stored under the old
# name resumes under the new one (the judge became the email world's env.judge; the
# curriculum's start names the world's difficulty level)
RENAMED = {"judge.": "env.judge.", "algo.curriculum.start_hops": "algo.curriculum.start_level"}
# the axes whose backends have their own keys: a cell stored when every backend's keys
# sat on one flat schema (sampler.urls on an hf cell) resumes without those it never used
BACKEND_AXES = {"sampler": SAMPLERS, "learner": LEARNERS}


def _flat(node, prefix: str = "") -> dict:
    if isinstance(node, dict):
        out = {}
        for key, value in node.items():
            out.update(_flat(value, f"{prefix}{key}."))
        return out or {prefix[:-1]: {}}
    return {prefix[:-1]: node}


def _same(a, b) -> bool:
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    return a == b


def config_changes(stored: dict, cfg: DictConfig) -> dict[str, tuple]:
    """{key: (stored value, new value)} of the keys that differ and may change results
    (a key only one side has counts, with None on the other)."""
    new = _flat(yaml.safe_load(OmegaConf.to_yaml(cfg, resolve=True)) or {})
    old = {_renamed(k): v for k, v in _flat(stored or {}).items()}
    old = {k: v for k, v in old.items() if k in new or not _unused_default(k, v)}
    return {k: (old.get(k), new.get(k)) for k in sorted(set(old) | set(new))
            if not _same(old.get(k), new.get(k)) and not _allowed(k)}


def _unused_default(key: str, value) -> bool:
    """`key` is another backend's own key (sampler.urls on an hf cell) holding that
    backend's default: the flat schema of earlier versions stored it, nothing read it."""
    group, _, leaf = key.partition(".")
    registry = BACKEND_AXES.get(group)
    if registry is None:
        return False
    return any(leaf in defaults and _same(defaults[leaf], value)
               for defaults in (_defaults(registry, n) for n in registry.owners(leaf.split(".")[0])))


def _defaults(registry, name: str) -> dict:
    """The flat defaults of a backend's schema ({"urls": [], "ds_overrides": {}, ...})."""
    return _flat(OmegaConf.to_container(OmegaConf.structured(registry.config(name))))


def _renamed(key: str) -> str:
    for was, now in RENAMED.items():
        if key == was or (was.endswith(".") and key.startswith(was)):
            return now + key[len(was):]
    return key


def _allowed(key: str) -> bool:
    return any(key == a or key.startswith(a + ".") for a in ALLOW_CHANGE)


def stored_config(cell_path: Path) -> dict | None:
    """The config a cell was started with (its config.yaml), None if it has none; an
    unreadable one is a ConfigError naming the file."""
    path = Path(cell_path) / "config.yaml"
    if not path.exists():
        return None
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (yaml.YAMLError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: not a readable config ({type(exc).__name__}); the "
                          "cell's stored config was edited or corrupted") from None
    return data if isinstance(data, dict) else {}


def describe(changes: dict[str, tuple], limit: int = 8) -> str:
    """'trainer.lr 0.0001 -> 0.01, reward.name shaped -> outcome' (the first `limit`)."""
    parts = [f"{k} {_short(a)} -> {_short(b)}" for k, (a, b) in list(changes.items())[:limit]]
    more = len(changes) - limit
    return ", ".join(parts) + (f" (and {more} more)" if more > 0 else "")


def _short(value) -> str:
    text = json.dumps(value, default=str) if not isinstance(value, str) else value
    return text if len(text) <= 40 else text[:37] + "..."


def check_resume(cell_path: Path, cfg: DictConfig, started: bool) -> dict[str, tuple]:
    """The changes of an interrupted cell's config ({} when none, or when the cell has no
    work on disk yet); a ConfigError naming the keys unless run.allow_config_change."""
    stored = stored_config(cell_path)
    if stored is None or not started:
        return {}
    check_world_size(cell_path, stored, cfg)
    changes = config_changes(stored, cfg)
    if changes and not cfg.run.allow_config_change:
        raise ConfigError(
            f"cell {cell_path} was started with another config: {describe(changes)}; "
            "resuming would mix two runs: use the original values or a new output "
            "directory, or pass run.allow_config_change=true to resume anyway (recorded)")
    return changes


def check_world_size(cell_path: Path, stored: dict, cfg: DictConfig) -> None:
    """A cell resumes with the number of ranks it started with: its ZeRO-3 checkpoint is
    partitioned per rank (DeepSpeed's universal checkpoint converts it: docs/distributed.md)."""
    was = int(((stored.get("run") or {}).get("world_size")) or 1)
    now = int(cfg.run.world_size)
    if was != now:
        raise ConfigError(
            f"cell {cell_path} was run with {was} rank(s) (run.world_size={was} in its "
            f"config.yaml) and this launch has {now}: resume it with {was} rank(s) "
            "(torchrun --nproc-per-node), or use a new output directory")


def record_changes(cell_path: Path, step: int, changes: dict[str, tuple]) -> str:
    """Append the accepted change to config_changes.jsonl; the text for the metrics."""
    row = {"step": step, "changes": {k: [a, b] for k, (a, b) in changes.items()}}
    with (Path(cell_path) / CHANGES_FILE).open("a", encoding="utf-8") as fh:
        fh.write(json.dumps(row, default=str) + "\n")
    return describe(changes, limit=len(changes))
