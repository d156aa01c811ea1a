"""One registry class for every extension axis (environments, rewards, advantage
estimators, policy losses, agents, parsers, samplers, learners): a dict name -> function
or class, filled by a decorator where the entry is defined; config validation, its error
messages and docs/configuration.md read the names from it.

Register your own from your own module, then select it by name, e.g.

    from ablate.algos import ADVANTAGE_ESTIMATORS

    @ADVANTAGE_ESTIMATORS.register("median_baseline")
    def median_baseline(rewards, group_ids, **kw): ...

    python -m ablate algo.plugins=[my_pkg.my_algos] algo.adv_estimator=median_baseline
"""
from __future__ import annotations

import importlib
from typing import Any, Callable, Iterable, TypeVar

F = TypeVar("F", bound=Callable[..., Any])


class Registry(dict):
    """A dict name -> callable that knows the config key selecting from it."""

    def __init__(self, key: str, what: str):
        super().__init__()
        self.key, self.what = key, what

    def register(self, name: str) -> Callable[[F], F]:
        """Decorator: `@REGISTRY.register("name")`. A name is registered once."""
        def add(fn: F) -> F:
            if name in self:
                raise ValueError(f"{self.what} {name!r} is registered twice "
                                 f"({self[name].__module__} and {fn.__module__})")
            self[name] = fn
            return fn
        return add

    def get_checked(self, name: str) -> Any:
        """The entry, or a one-line ValueError naming the key and the allowed names."""
        if name not in self:
            raise ValueError(f"{self.key}={name!r} is not one of {list(self)}")
        return self[name]


def import_plugins(modules: Iterable[str] | None) -> None:
    """Import the user's modules (`algo.plugins`) so their @register decorators run."""
    for name in modules or ():
        try:
            importlib.import_module(str(name))
        except ImportError as e:
            raise ValueError(f"algo.plugins: cannot import {name!r} ({e})") from None
