"""`python -m ablate`: the Hydra app that runs one cell, a grid (-m) or a preset.

Before Hydra runs anything, every job of the command line (each cell of a -m grid) is
composed in-process and validated, so bad input fails before any work starts, with the
key and the allowed values named and no traceback.
"""
from __future__ import annotations

import logging
import os
import sys
from pathlib import Path

import hydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig

from ablate.config import ConfigError, register, validate

log = logging.getLogger("ablate")

# Groups whose default comes from the schema (not the defaults list), so that the design
# card's `+reward=shaped` is legal; `reward=shaped` is rewritten to it.
APPEND_GROUPS = ("reward", "algo", "experiment")
# Groups in the defaults list: `+model=x` is rewritten to `model=x`.
DEFAULT_GROUPS = ("env", "judge", "mode", "model", "sampler", "learner")


def conf_dir() -> Path:
    """conf/ beside the package in a checkout or editable install, else the copy shipped
    inside the wheel as ablate/conf."""
    here = Path(__file__).resolve().parent
    for candidate in (here.parent / "conf", here / "conf"):
        if (candidate / "config.yaml").is_file():
            return candidate
    raise FileNotFoundError(f"ablate: cannot find conf/config.yaml near {here}")


def normalise_overrides(args: list[str]) -> list[str]:
    out = []
    for arg in args:
        if arg.startswith("-") or "=" not in arg:
            out.append(arg)
            continue
        key = arg.split("=", 1)[0]
        bare = key.lstrip("+~")
        if bare in APPEND_GROUPS and not key.startswith(("+", "~")):
            arg = "+" + arg
        elif bare in DEFAULT_GROUPS and key.startswith("+") and not key.startswith("++"):
            arg = arg[1:]
        out.append(arg)
    return out


def _split_cli(args: list[str]) -> tuple[list[str], bool, bool]:
    """(overrides, multirun, skip_preflight) from raw argv."""
    overrides, multirun, skip = [], False, False
    it = iter(args)
    for arg in it:
        if arg in ("-m", "--multirun"):
            multirun = True
        elif arg in ("--help", "-h", "--hydra-help", "--info", "--version", "--shell-completion",
                     "-sc", "--experimental-rerun"):
            skip = True
        elif arg in ("--cfg", "-c", "--package", "-p", "--config-path", "-cp", "--config-name",
                     "-cn", "--config-dir", "-cd"):
            next(it, None)
        elif not arg.startswith("-"):
            overrides.append(arg)
    return overrides, multirun, skip


def expand_jobs(overrides: list[str], multirun: bool) -> list[list[str]]:
    """The override list of every job Hydra's basic sweeper would launch."""
    if not multirun:
        return [overrides]
    from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra import compose, initialize_config_dir

    with initialize_config_dir(config_dir=str(conf_dir()), version_base="1.3"):
        base = compose("config", overrides=[o for o in overrides if not _is_sweep(o)],
                       return_hydra_config=True)
    params = base.hydra.sweeper.get("params") or {}
    sweep_args = [f"{k}={v}" for k, v in params.items()] + overrides
    parsed = OverridesParser.create().parse_overrides(sweep_args)
    batches = BasicSweeper.split_arguments(parsed, None)
    return [job for batch in batches for job in batch]


def _is_sweep(override: str) -> bool:
    value = override.split("=", 1)[1] if "=" in override else ""
    return "," in value or value.startswith(("range(", "choice(", "glob("))


def compose_config(overrides: list[str]) -> DictConfig:
    from hydra import compose, initialize_config_dir

    register()
    with initialize_config_dir(config_dir=str(conf_dir()), version_base="1.3"):
        return compose("config", overrides=overrides)


def preflight(args: list[str]) -> int:
    """Compose and validate every job; print a clean error and return 2 on bad input."""
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    overrides, multirun, skip = _split_cli(args)
    if skip:
        return 0
    try:
        jobs = expand_jobs(overrides, multirun)
        for job in jobs:
            cfg = compose_config(job)
            validate(cfg)
            check_runtime(cfg)
    except (ConfigError, HydraException, OmegaConfBaseException, FileNotFoundError) as exc:
        print(f"ablate: error: {_message(exc)}", file=sys.stderr)
        if overrides:
            print(f"ablate: overrides were: {' '.join(overrides)}", file=sys.stderr)
        return 2
    return 0


def _message(exc: BaseException) -> str:
    """The exception's text plus its causes' (Hydra wraps the informative one)."""
    parts = []
    while exc is not None:
        text = str(exc).strip()
        if text and text not in parts:
            parts.append(text)
        exc = exc.__cause__
    return "\n".join(parts) or "invalid configuration"


def check_runtime(cfg: DictConfig) -> None:
    """Checks that need the file system (data paths), still before any work."""
    if cfg.env.name == "enronhop":
        for key in ("emails_path", "train_tasks_path", "test_tasks_path"):
            path = Path(os.path.expanduser(cfg.env[key]))
            if not path.is_file():
                raise ConfigError(f"env.{key}: file not found: {path}")
    if cfg.model.path:
        path = Path(os.path.expanduser(cfg.model.path))
        if not path.exists():
            raise ConfigError(f"model.path: directory not found: {path}")
    else:                                  # a packaged model (optional extra) is installed
        from ablate.models.smollm import check_available
        check_available(cfg.model.name)


register()


@hydra.main(config_path=str(conf_dir()), config_name="config", version_base="1.3")
def _hydra_main(cfg: DictConfig) -> float | None:
    from ablate.cell import run_cell

    out_dir = HydraConfig.get().runtime.output_dir
    summary = run_cell(cfg, out_dir)
    return summary.get("final_accuracy") if summary else None


def main(argv: list[str] | None = None) -> None:
    args = normalise_overrides(list(sys.argv[1:] if argv is None else argv))
    code = preflight(args)
    if code:
        sys.exit(code)
    sys.argv = [sys.argv[0]] + args
    _hydra_main()
