"""The command line before Hydra sees it: the design card's spellings normalised
(`+reward=shaped`, `reward.weights.x=w`), flags moved first, a grid's jobs expanded as
Hydra's basic sweeper would, and the command line's plugins imported. Used by
ablate.apps.cli (python -m ablate), apps.check and apps.search."""
from __future__ import annotations

from pathlib import Path

from omegaconf import DictConfig

from ablate.core.registry import import_plugins
from ablate.loop.config import ConfigError, register

# Groups whose default comes from the schema (not the defaults list), so that the design
# card's `+reward=shaped` is legal; `reward=shaped` is rewritten to it.
APPEND_GROUPS = ("reward", "algo", "experiment")
# `reward.weights.<component>=w` is rewritten to `++...`: the schema's weights are empty
# (every component 1.0) and a conf/reward yaml lists its own, so the key may be new.
WEIGHTS = "reward.weights."
# `env.options.<arg>=v` likewise: an environment's options are free-form (its own
# check_config validates them), so a key its yaml does not list may be new.
OPTIONS = "env.options."
# Groups in the defaults list: `+model=x` is rewritten to `model=x`.
DEFAULT_GROUPS = ("env", "mode", "model", "sampler", "learner")
# keys that moved: the old spelling is one line naming the new one
MOVED = {"judge": "the answer judge is the email world's own key now: env.judge.name=exact|llm "
                  "and env.judge.<base_url|model|api_key_env|timeout_s|max_retries|cache_dir>"}


def conf_dir() -> Path:
    """conf/ beside the package in a checkout or editable install, else the copy shipped
    inside the wheel as ablate/conf."""
    here = Path(__file__).resolve().parents[1]   # the ablate package
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
        elif bare.startswith((WEIGHTS, OPTIONS)) and not key.startswith(("+", "~")):
            arg = "++" + arg         # a component's weight: set, or added to the scheme's
        elif bare in DEFAULT_GROUPS and key.startswith("+") and not key.startswith("++"):
            arg = arg[1:]
        out.append(arg)
    return out


# Hydra flags that take a value (the next argument)
VALUE_FLAGS = ("--cfg", "-c", "--package", "-p", "--config-path", "-cp", "--config-name",
               "-cn", "--config-dir", "-cd", "--info", "-i", "--experimental-rerun")
INFO_FLAGS = ("--help", "-h", "--hydra-help", "--info", "-i", "--version",
              "--shell-completion", "-sc", "--experimental-rerun", "--cfg", "-c",
              "--resolve")


def _split_cli(args: list[str]) -> tuple[list[str], bool, bool]:
    """(overrides, multirun, skip_preflight) from raw argv. `--cfg job` and the other
    information flags print without running anything: no preflight needed."""
    overrides, multirun, skip = [], False, False
    it = iter(args)
    for arg in it:
        if arg in ("-m", "--multirun"):
            multirun = True
        elif arg in INFO_FLAGS:
            skip = True
            if arg in VALUE_FLAGS and arg not in ("--info", "-i"):
                next(it, None)
        elif arg in VALUE_FLAGS:
            next(it, None)
        elif arg in ("--run", "-r"):
            pass
        elif arg.startswith("-") and "=" not in arg:
            raise ConfigError(f"unknown option {arg!r}; python -m ablate takes overrides "
                              "key=value, -m/--multirun, --cfg job|hydra|all, --help")
        else:
            overrides.append(arg)
    return overrides, multirun, skip


def flags_first(args: list[str]) -> list[str]:
    """Hydra's argument parser takes its flags (-m, --cfg job, ...) only before the
    overrides; move them there, so `-m` may stand anywhere as users expect."""
    flags, overrides = [], []
    it = iter(args)
    for arg in it:
        if arg.startswith("-") and "=" not in arg:
            flags.append(arg)
            if arg in VALUE_FLAGS and arg not in ("--info", "-i"):
                value = next(it, None)
                if value is not None:
                    flags.append(value)
        else:
            overrides.append(arg)
    return flags + overrides


def expand_jobs(overrides: list[str], multirun: bool) -> list[list[str]]:
    """The override list of every job Hydra's basic sweeper would launch."""
    if not multirun:
        return [overrides]
    from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
    from hydra.core.override_parser.overrides_parser import OverridesParser

    params = _sweep_params(overrides)
    sweep_args = [f"{k}={v}" for k, v in params.items()] + overrides
    parsed = OverridesParser.create().parse_overrides(sweep_args)
    batches = BasicSweeper.split_arguments(parsed, None)
    return [job for batch in batches for job in batch]


def _sweep_params(overrides: list[str]) -> dict:
    """The composed config's hydra.sweeper.params (a preset's own grid). Only group
    choices and hydra.* keys can change it, so only those are composed: a value such as
    `reward.weights.wrong=0` may need a group the preset's sweep itself selects."""
    from hydra import compose, initialize_config_dir

    picks = [o for o in overrides if not _is_sweep(o) and "=" in o
             and ("." not in o.split("=", 1)[0] or o.lstrip("+~").startswith("hydra."))]
    register_launchers()
    with initialize_config_dir(config_dir=str(conf_dir()), version_base="1.3"):
        base = compose("config", overrides=picks, return_hydra_config=True)
    return dict(base.hydra.sweeper.get("params") or {})


def align_sweep_keys(args: list[str]) -> list[str]:
    """In a -m grid, a command-line `key=...` replaces the preset's sweep of that key
    whatever prefix normalise_overrides gave it. Hydra's basic sweeper keys its product
    by the override's text, prefix included (hydra/_internal/core_plugins/
    basic_sweeper.py `split_arguments`), so `++reward.weights.wrong=0.25` beside a
    preset's `reward.weights.wrong: 0.0,1.0` would run every value of both. A single
    value becomes `choice(value)`: Hydra composes a multirun's base config from the
    non-sweep overrides, before the preset's sweep has selected the group the key
    needs (hydra/_internal/config_loader_impl.py)."""
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    overrides, multirun, skip = _split_cli(args)
    if not multirun or skip:
        return args
    try:
        params = _sweep_params(overrides)
    except (ConfigError, HydraException, OmegaConfBaseException, ValueError):
        return args      # preflight composes again and names the error in one line
    preset = {k.lstrip("+~"): k for k in params}
    out = []
    for arg in args:
        key, sep, value = arg.partition("=")
        own = preset.get(key.lstrip("+~")) if sep and not key.startswith(("-", "~")) else None
        if own and not _is_sweep(arg):
            value = f"choice({value})"   # a sweep: Hydra's base compose leaves it out
        out.append(f"{own}={value}" if own else arg)
    return out


def _is_sweep(override: str) -> bool:
    value = override.split("=", 1)[1] if "=" in override else ""
    return "," in value or value.startswith(("range(", "choice(", "glob("))


def import_cli_plugins(overrides: list[str]) -> None:
    """The `plugins=[...]` of the command line imported before Hydra composes: a plugin's
    backend (`sampler=NAME`) is an option of its group only once it has registered."""
    for arg in overrides:
        key, _, value = arg.partition("=")
        if key.lstrip("+~") in ("plugins", "algo.plugins") and value:
            mods = [m.strip().strip("'\"") for m in value.strip().strip("[]").split(",")]
            import_plugins([m for m in mods if m], key=key.lstrip("+~"))


def register_launchers() -> None:
    """`hydra/launcher=pack` (hydra_plugins/ablate_pack_launcher) known to Hydra however
    ablate was installed: Hydra finds plugins by walking `hydra_plugins.__path__`, which
    the import hook of a PEP 660 editable install hides (hydra-ecosystem/hydra#3252), so
    the launcher is imported (its ConfigStore entry) and registered by name here. A
    checkout whose editable install predates the launcher finds it beside the package;
    where it is nowhere, `hydra/launcher=pack` is an unknown option, in Hydra's line."""
    from hydra.core.plugins import Plugins
    try:
        import hydra_plugins
        beside = Path(__file__).resolve().parents[2] / "hydra_plugins"
        if (beside / "ablate_pack_launcher").is_dir() and \
                str(beside) not in list(hydra_plugins.__path__):
            hydra_plugins.__path__.append(str(beside))
        from hydra_plugins.ablate_pack_launcher.pack_launcher import PackLauncher
    except ImportError:
        return
    Plugins.instance().register(PackLauncher)


def compose_config(overrides: list[str], *, hydra_node: bool = False) -> DictConfig:
    from hydra import compose, initialize_config_dir

    try:
        import_cli_plugins(overrides)
    except ConfigError:
        pass          # validate names the module that cannot be imported, in one line
    register()
    register_launchers()
    with initialize_config_dir(config_dir=str(conf_dir()), version_base="1.3"):
        return compose("config", overrides=overrides, return_hydra_config=hydra_node)


