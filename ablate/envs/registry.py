"""Registering a world and making one from the `env` config group: a registered name
(`env.name`) or a user's own class (`env._target_: my_module.MyEnv`, imported the Hydra
way). A world declares its own reward schemes, its default reward and the labels of its
table columns where it registers (`register_env`); its rewards join the one reward
registry (ablate.rewards.REWARDS), owned by it."""
from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Optional

from ablate.core.registry import Registry
from ablate.protocol.environment import EnvError, Environment
from ablate.rewards import REWARDS, Rubric, check_world_model_for

# name -> Environment class: the single source of `env.name` (ablate.core.registry)
ENVIRONMENTS = Registry("env.name", "environment")


@dataclass(frozen=True)
class Declared:
    """What a world declares when it registers (docs/environments.md)."""
    rewards: tuple[str, ...] = ()         # its own schemes (registered in REWARDS)
    default_reward: str = "outcome"       # reward.name when the command line sets none
    breakdown_label: str = "difficulty"   # what Task.difficulty counts: its eval-row column
    behaviour_labels: Mapping[str, str] = field(default_factory=dict)  # behaviour() columns
    config_errors: tuple[type, ...] = ()  # exceptions of from_config that mean bad input
    seed_key: str = ""                    # the env key (or env.options key) seeding its tasks


_DECLARED: dict[type, Declared] = {}
# the eval rows' own columns (ablate/loop/scoring.py eval_rows): a breakdown label may not
# take one of them
ROW_KEYS = ("step", "task_id", "sample", "correct", "reward", "decoding")


def register_env(name: str, *, rewards: Optional[Mapping[str, Rubric]] = None,
                 default_reward: str = "outcome", breakdown_label: str = "difficulty",
                 behaviour_labels: Optional[Mapping[str, str]] = None,
                 config_errors: tuple[type, ...] = (), seed_key: str = ""
                 ) -> Callable[[type[Environment]], type[Environment]]:
    """Class decorator: `@register_env("name", rewards={"mine": Rubric(...)},
    default_reward="mine")` registers the class in ENVIRONMENTS, its own reward schemes in
    REWARDS (offered only to the worlds that declare them) and what Declared lists;
    `seed_key` names the `env.<key>` (or `env.options.<key>`) its task generator is seeded
    by: preflight refuses splits that do not change with it."""
    own = dict(rewards or {})
    if not breakdown_label.isidentifier() or breakdown_label in ROW_KEYS:
        raise ValueError(f"register_env({name!r}): breakdown_label={breakdown_label!r} names "
                         "the eval rows' difficulty column: a Python identifier, none of "
                         f"{list(ROW_KEYS)}")
    if default_reward not in own and REWARDS.get(default_reward) is None:
        raise ValueError(f"register_env({name!r}): default_reward={default_reward!r} is "
                         f"neither its own scheme nor a registered one: {sorted(REWARDS)}")
    declared = Declared(tuple(own), default_reward, breakdown_label,
                        dict(behaviour_labels or {}), tuple(config_errors), seed_key)

    def add(cls: type[Environment]) -> type[Environment]:
        if name not in ENVIRONMENTS and not cls.__dict__.get("name"):
            cls.name = name          # a class registered under several names keeps its first
        for scheme, rubric in own.items():
            REWARDS.register(scheme, rubric)
        _DECLARED[cls] = declared
        return ENVIRONMENTS.register(name)(cls)
    return add


def declared(env: Any) -> Declared:
    """What the world (an Environment or its class) declared when it registered, or the
    defaults for one that did not (a subclass inherits its base's declaration)."""
    cls = env if isinstance(env, type) else type(env)
    return next((_DECLARED[c] for c in cls.__mro__ if c in _DECLARED), Declared())


def world_rewards() -> set[str]:
    """The reward schemes some world owns (the others are generic)."""
    return {r for d in _DECLARED.values() for r in d.rewards}


def check_reward_for(reward_cfg: Any, env: Any, label: str = "") -> None:
    """ValueError (one line) when `reward.name` is another world's own scheme, or the
    world-model reward is on for a world with nothing to predict. `env`: the world or its
    class (preflight, before building it; `label` names it)."""
    label = label or getattr(env, "name", "") or getattr(env, "__name__", "")
    check_world_model_for(reward_cfg, env, label)
    own, owned = declared(env).rewards, world_rewards()
    if reward_cfg.name in owned and reward_cfg.name not in own:
        generic = [n for n in REWARDS if n not in owned]
        raise ValueError(f"reward.name={reward_cfg.name!r} is another environment's scheme; "
                         f"env={label} allows {sorted(set(generic) | set(own))}")


def describe(env: Environment) -> dict:
    """environment.json's content: the world's describe() and what it declared."""
    d = declared(env)
    return {**env.describe(), "default_reward": d.default_reward,
            "behaviour_labels": dict(d.behaviour_labels), "breakdown_label": d.breakdown_label}


def env_names() -> tuple[str, ...]:
    return tuple(ENVIRONMENTS)


def _get(env_cfg, key: str):
    return env_cfg.get(key) if hasattr(env_cfg, "get") else getattr(env_cfg, key, None)


def env_class(env_cfg) -> type[Environment]:
    """The class `env_cfg` names; EnvError (one line) for unknown names and targets."""
    target = _get(env_cfg, "_target_")
    if target:
        cls = import_target(str(target))
        if not (isinstance(cls, type) and issubclass(cls, Environment)):
            raise EnvError(f"env._target_={target!r} is not a subclass of "
                           "ablate.envs.Environment")
        name = _get(env_cfg, "name")
        if name and ENVIRONMENTS.get(name) not in (None, cls):
            raise EnvError(f"env.name={name!r} is a built-in environment; give your "
                           f"env._target_={target!r} another name")
        _check_declared_name(cls, name, target)
        if name:
            ENVIRONMENTS.setdefault(name, cls)   # so `env.name` validates like a built-in
        return cls
    name = _get(env_cfg, "name")
    if name not in ENVIRONMENTS:
        raise EnvError(f"env.name={name!r} is not a registered environment; allowed: "
                       f"{', '.join(ENVIRONMENTS)} (or set env._target_ to your class)")
    return ENVIRONMENTS[name]


def import_target(target: str):
    """The object a dotted `env._target_` names (`pkg.module.Class`, a nested class too);
    EnvError (one line) naming the missing module, the missing class (with the
    Environment classes its module has), or the error importing the module raised."""
    parts = target.split(".")
    for i in range(len(parts) - 1, 0, -1):
        module_name = ".".join(parts[:i])
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            if exc.name and (module_name + ".").startswith(exc.name + "."):
                continue             # this prefix is no module: a shorter one may be
            raise _import_error(target, module_name, exc) from None
        except Exception as exc:     # the user's module itself fails to import
            raise _import_error(target, module_name, exc) from None
        return _attribute(target, module, parts[i:])
    raise EnvError(f"env._target_={target!r}: cannot import it: no module {parts[0]!r} on "
                   "the Python path (sys.path, e.g. PYTHONPATH); expected my_module.MyEnv")


def _import_error(target: str, module_name: str, exc: BaseException) -> EnvError:
    text = " ".join(str(exc).split())
    return EnvError(f"env._target_={target!r}: cannot import it: importing module "
                    f"{module_name!r} raised {type(exc).__name__}: {text}")


def _attribute(target: str, module, names: list[str]):
    obj, owner = module, module.__name__
    for name in names:
        if not hasattr(obj, name) and hasattr(obj, "__path__"):    # a package
            raise EnvError(f"env._target_={target!r}: cannot import it: package {owner!r} "
                           f"has no module {name!r}; expected my_module.MyEnv")
        if not hasattr(obj, name):
            found = sorted(k for k, v in vars(obj).items() if isinstance(v, type)
                           and issubclass(v, Environment) and v is not Environment)
            raise EnvError(f"env._target_={target!r}: cannot import it: {owner!r} has no "
                           f"class {name!r}; its Environment classes: "
                           f"{', '.join(found) or '(none)'}")
        obj, owner = getattr(obj, name), f"{owner}.{name}"
    return obj


def _check_declared_name(cls, name, target) -> None:
    """`env.name` must be a name the class was registered (or declared) under."""
    known = {n for n, c in ENVIRONMENTS.items() if c is cls} | (
        {cls.__dict__["name"]} if cls.__dict__.get("name") else set())
    if name and known and name not in known:
        raise EnvError(f"env.name={name!r} contradicts env._target_={target!r}, registered "
                       f"as {', '.join(sorted(map(repr, known)))}; expected that name")


def make_env(env_cfg, **objects) -> Environment:
    """An environment from its config: `Class.from_config(env_cfg, **objects)`
    (objects: e.g. `cfg=` the whole run config, `preflight=True` at preflight, `judge=`
    an answer judge; a class ignores those it does not take)."""
    cls = env_class(env_cfg)
    env = cls.from_config(env_cfg, **objects)
    if not env.name:             # a class registered by env.name alone: its messages name it
        env.name = _get(env_cfg, "name") or cls.__name__
    return env
