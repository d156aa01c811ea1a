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

import dataclasses
import importlib
import re
import sys
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Optional

from ablate.core.errors import ConfigError


def first_line(entry: Any) -> str:
    """The first sentence of an entry's docstring, else of its module's ('' without)."""
    doc = entry.__dict__.get("__doc__") if isinstance(entry, type) else entry.__doc__
    if not doc:
        doc = getattr(sys.modules.get(getattr(entry, "__module__", "")), "__doc__", None)
    para = " ".join((doc or "").strip().split("\n\n")[0].split())
    return re.split(r"(?<=\.)\s+(?=[A-Z(`])", para)[0]


@dataclass(frozen=True)
class Declaration:
    """What an entry of a backend axis (sampler, learner, algorithm) declares where it
    registers, as a world does with register_env: the loop, preflight and the memory plan
    ask this, never the entry's name.

    schema: its config dataclass (the axis's base config, or a subclass adding the
        backend's own keys; stored in Hydra's ConfigStore as `<group>/<name>_schema`,
        which conf/<group>/<name>.yaml lists first, and as `<group>/<name>` for a
        plugin's backend, which has no yaml).
    packages: importable modules it needs (preflight names the missing one).
    capabilities: the names of what it can do (each axis lists its vocabulary).
    check: check(cfg) raising ConfigError naming the key (its own keys' checks).
    memory: memory(cfg, shape, ctx) -> (terms, problems): its share of the memory plan.
    remedies: remedies(cfg, world) -> [(label, {key: value}, world)]: single changes of
        its own keys that lower its memory, which a refused plan tries.
    """
    schema: Optional[type] = None
    packages: tuple = ()
    capabilities: frozenset = frozenset()
    check: Optional[Callable] = None
    memory: Optional[Callable] = None
    remedies: Optional[Callable] = None

    def can(self, capability: str) -> bool:
        return capability in self.capabilities


class Registry(dict):
    """A dict name -> entry that knows the config key selecting from it, each entry's
    one-line doc, the module that registered it and (on a backend axis) its Declaration."""

    def __init__(self, key: str, what: str, *, schema: Optional[type] = None,
                 capabilities: Iterable[str] = ()):
        super().__init__()
        self.key, self.what = key, what
        self.docs: dict[str, str] = {}
        self.modules: dict[str, str] = {}
        self.declarations: dict[str, Declaration] = {}
        self.schema = schema                      # the axis's base config dataclass
        self.capabilities = frozenset(capabilities)   # the vocabulary entries may declare

    def register(self, name: str, entry: Any = None, *, doc: Optional[str] = None,
                 module: Optional[str] = None, **declared: Any) -> Any:
        """`@REGISTRY.register("name")` as a decorator, or `REGISTRY.register("name",
        entry)`; returns the entry. A name holds one entry (re-registering the same one is
        a no-op). `doc` defaults to the entry's first docstring line. Keyword arguments
        are its Declaration's fields (schema=, packages=, capabilities=, check=, memory=)."""
        decl = self._declaration(name, declared)

        def add(obj: Any) -> Any:
            if name in self and self[name] is not obj:
                raise ValueError(f"{self.what} {name!r} is registered twice "
                                 f"({self.module_of(name)} and {_module(obj, module)})")
            self[name] = obj
            self.docs[name] = first_line(obj) if doc is None else doc
            self.modules[name] = _module(obj, module)
            self.declarations[name] = decl
            return obj
        return add if entry is None else add(entry)

    def _declaration(self, name: str, declared: dict) -> Declaration:
        caps = frozenset(declared.pop("capabilities", ()))
        unknown = sorted(caps - self.capabilities)
        if unknown:
            raise ValueError(f"{self.what} {name!r} declares unknown capabilities {unknown}; "
                             f"known: {sorted(self.capabilities)}")
        schema = declared.pop("schema", None) or self.schema
        if schema is not None and self.schema is not None and not issubclass(schema, self.schema):
            raise ValueError(f"{self.what} {name!r}: its schema {schema.__name__} must "
                             f"subclass {self.schema.__name__}")
        return Declaration(schema=schema, capabilities=caps,
                           packages=tuple(declared.pop("packages", ())), **declared)

    def declared(self, name: str) -> Declaration:
        """The entry's Declaration (ConfigError for an unknown name)."""
        self.get_checked(name)
        return self.declarations.get(name) or Declaration(schema=self.schema)

    def schema_keys(self, name: str) -> set[str]:
        """The keys of the entry's config schema (empty without one)."""
        schema = self.declared(name).schema
        return {f.name for f in dataclasses.fields(schema)} if schema else set()

    def config(self, name: str, **values: Any) -> Any:
        """An instance of the entry's config schema with `name` set (tests, benchmarks,
        recipes that build a config without Hydra)."""
        schema = self.declared(name).schema
        if schema is None:
            raise ValueError(f"{self.what} {name!r} declares no config schema")
        return schema(name=name, **values)

    def owners(self, key: str) -> list[str]:
        """The entries whose schema holds `key`."""
        return [n for n in self if key in self.schema_keys(n)]

    def declaring(self, capability: str) -> list[str]:
        """The entries that declare `capability`, in registration order."""
        return [n for n in self if self.declared(n).can(capability)]

    def __delitem__(self, name: str) -> None:
        super().__delitem__(name)
        self.docs.pop(name, None)
        self.modules.pop(name, None)
        self.declarations.pop(name, None)

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

