"""A reward scheme as weighted components, after the Rubric of Prime Intellect's verifiers
(verifiers/rubrics/rubric.py: a list of reward functions, each with a weight, the reward
their weighted sum).

A component is the one reward signature of ablate (docs/rewards.md):

    fn(episode, cfg) -> float

`episode`: the judged episode (`.correct`, `.answered`, `.calls` / `.results`, `.task`,
`.num_turns`, `.max_turns`); `cfg`: the RewardConfig (or None) for the knobs it honours.
The component is named by the function. `Rubric(*components)` is a scheme: called on an
episode it returns `(total, components)`, each component `weight x fn(episode, cfg)` with
the weight from `reward.weights.<name>` (1.0 when not given: the scheme as published), the
total their sum. `reward.weights.<name>=0` removes that component.
"""
from __future__ import annotations

import math
import sys
from typing import Any, Callable, Mapping, Optional

from ablate.core.errors import ConfigError

Component = Callable[[Any, Any], float]
Components = dict[str, float]


class Rubric:
    """Named component functions (in order); the total is Σ weight x component."""

    def __init__(self, *components: Component, doc: str = ""):
        self.components: dict[str, Component] = {fn.__name__: fn for fn in components}
        if len(self.components) != len(components):
            raise ValueError("Rubric: two components share a name: "
                             f"{[fn.__name__ for fn in components]}")
        self.__doc__ = doc
        # the defining module, as collections.namedtuple records it (registries read it)
        self.__module__ = sys._getframe(1).f_globals.get("__name__", "__main__")

    def names(self) -> list[str]:
        return list(self.components)

    def check_weights(self, weights: Mapping[str, Any], scheme: str = "") -> None:
        """ConfigError (one line) for a weight of no component, or one not finite."""
        for name, w in weights.items():
            if name not in self.components:
                raise ConfigError(f"reward.weights.{name} is not a component of reward.name="
                                  f"{scheme!r}; its components: {self.names()}")
            if isinstance(w, bool) or not isinstance(w, (int, float)) or not math.isfinite(w):
                raise ConfigError(f"reward.weights.{name}={w!r} is not allowed; give a "
                                  "finite number")

    def __call__(self, episode: Any, cfg: Optional[Any] = None) -> tuple[float, Components]:
        weights = weights_of(cfg)
        self.check_weights(weights, getattr(cfg, "name", ""))
        comps = {name: float(weights.get(name, 1.0)) * fn(episode, cfg)
                 for name, fn in self.components.items()}
        return sum(comps.values()), comps


def weights_of(cfg: Optional[Any]) -> Mapping[str, Any]:
    """`reward.weights` of a RewardConfig / DictConfig, {} without one."""
    weights = getattr(cfg, "weights", None) if cfg is not None else None
    return weights if weights is not None else {}
