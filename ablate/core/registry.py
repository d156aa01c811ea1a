"""One registry class for every extension axis (environments, rewards, advantage
estimators, policy losses, agents, parsers, samplers, learners): a dict name -> function,
class or object, filled where the entry is defined; config validation, its one-line error
messages and docs/configuration.md read the names (and each entry's one-line doc) from it.

Register your own from your own module, then list the module in `plugins` and select
the name, e.g.

    from ablate.algos import ADVANTAGE_ESTIMATORS

    @ADVANTAGE_ESTIMATORS.register("median_baseline")
    def median_baseline(rewards, group_ids, **kw): ...

    python -m ablate plugins=[my_pkg.my_algos] algo.adv_estimator=median_baseline

The package's own entries register the same way (`algo.plugins` is the older spelling of
`plugins`, still accepted).
"""
from __future__ import annotations

import importlib
import re
import sys
from typing import Any, Iterable, Optional

from ablate.core.errors import ConfigError


def first_line(entry: Any) -> str:
    """The first sentence of an entry's docstring, else of its module's ('' without)."""
    doc = entry.__dict__.get("__doc__") if isinstance(entry, type) else entry.__doc__
    if not doc:
        doc = getattr(sys.modules.get(getattr(entry, "__module__", "")), "__doc__", None)
    para = " ".join((doc or "").strip().split("\n\n")[0].split())
    return re.split(r"(?<=\.)\s+(?=[A-Z(`])", para)[0]


class Registry(dict):
    """A dict name -> entry that knows the config key selecting from it, each entry's
    one-line doc and the module that registered it."""

    def __init__(self, key: str, what: str):
        super().__init__()
        self.key, self.what = key, what
        self.docs: dict[str, str] = {}
        self.modules: dict[str, str] = {}

    def register(self, name: str, entry: Any = None, *, doc: Optional[str] = None,
                 module: Optional[str] = None) -> Any:
        """`@REGISTRY.register("name")` as a decorator, or `REGISTRY.register("name",
        entry)`; returns the entry. A name holds one entry (re-registering the same one is
        a no-op). `doc` defaults to the entry's first docstring line."""
        def add(obj: Any) -> Any:
            if name in self and self[name] is not obj:
                raise ValueError(f"{self.what} {name!r} is registered twice "
                                 f"({self.module_of(name)} and {_module(obj, module)})")
            self[name] = obj
            self.docs[name] = first_line(obj) if doc is None else doc
            self.modules[name] = _module(obj, module)
            return obj
        return add if entry is None else add(entry)

    def __delitem__(self, name: str) -> None:
        super().__delitem__(name)
        self.docs.pop(name, None)
        self.modules.pop(name, None)

    def names(self) -> list[str]:
        return list(self)

    def module_of(self, name: str) -> str:
        return self.modules.get(name) or _module(self[name], None)

    def builtin(self) -> list[str]:
        """The names the ablate package registers itself (docs list these; a user's module
        may have added more in this process)."""
        return [n for n in self if self.module_of(n).split(".")[0] == "ablate"]

    def get_checked(self, name: str) -> Any:
        """The entry, or a one-line ConfigError naming the key and the allowed names."""
        if name not in self:
            raise ConfigError(f"{self.key}={name!r} is not one of {self.names()}")
        return self[name]


def _module(obj: Any, module: Optional[str]) -> str:
    return module or getattr(obj, "__module__", None) or "?"


def import_plugins(modules: Iterable[str] | None, key: str = "plugins") -> None:
    """Import the user's modules (`plugins`, or its alias `algo.plugins`) so their
    registrations run before the names are checked."""
    for name in modules or ():
        try:
            importlib.import_module(str(name))
        except ImportError as e:
            raise ConfigError(f"{key}: cannot import {name!r} ({e})") from None

