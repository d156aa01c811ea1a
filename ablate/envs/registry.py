"""Making an environment from the `env` config group: a registered name (`env.name`) or
a user's own class (`env._target_: my_module.MyEnv`, imported the Hydra way)."""
from __future__ import annotations

from hydra.utils import get_class

from ablate.envs.base import ENVIRONMENTS, EnvError, Environment



def _get(env_cfg, key: str):
    return env_cfg.get(key) if hasattr(env_cfg, "get") else getattr(env_cfg, key, None)


def env_class(env_cfg) -> type[Environment]:
    """The class `env_cfg` names; EnvError (one line) for unknown names and targets."""
    target = _get(env_cfg, "_target_")
    if target:
        try:
            cls = get_class(str(target))
        except Exception as exc:   # hydra wraps ImportError / AttributeError
            raise EnvError(f"env._target_={target!r}: cannot import it ({exc})") from None
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
