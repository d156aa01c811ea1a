"""Making an environment from the `env` config group: a registered name (`env.name`) or
a user's own class (`env._target_: my_module.MyEnv`, imported the Hydra way)."""
from __future__ import annotations

import importlib
from typing import Callable

from ablate.core.registry import Registry
from ablate.protocol.environment import EnvError, Environment

# name -> Environment class: the single source of `env.name` (ablate.core.registry)
ENVIRONMENTS = Registry("env.name", "environment")


def register_env(name: str) -> Callable[[type[Environment]], type[Environment]]:
    """Class decorator: `@register_env("name")` registers the class in ENVIRONMENTS."""
    def add(cls: type[Environment]) -> type[Environment]:
        if name not in ENVIRONMENTS and not cls.__dict__.get("name"):
            cls.name = name          # a class registered under several names keeps its first
        return ENVIRONMENTS.register(name)(cls)
    return add


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


def make_env(env_cfg, judge_cfg=None, **objects) -> Environment:
    """An environment from its config: `Class.from_config(env_cfg, **objects)`
    (objects: e.g. `judge=...`, passed if the class takes them). `judge_cfg` (the `judge`
    group) is passed as the object `judge_cfg`: an environment with an answer judge
    makes its own from it (the email task's exact | llm)."""
    cls = env_class(env_cfg)
    if judge_cfg is not None:
        objects.setdefault("judge_cfg", judge_cfg)
    env = cls.from_config(env_cfg, **objects)
    if not env.name:             # a class registered by env.name alone: its messages name it
        env.name = _get(env_cfg, "name") or cls.__name__
    return env
