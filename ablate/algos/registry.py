"""Registries: the single source of the names an `algo.*` key accepts. Each is a dict
name -> function (or class), filled by a decorator where the function is defined; config
validation, its error messages and docs/algorithms.md read them.

Register your own from your own module, then select it by name:

    from ablate.algos import ADVANTAGE_ESTIMATORS, POLICY_LOSSES

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


# name -> fn(rewards[N], group_ids[N], **kw) -> advantages[N]
ADVANTAGE_ESTIMATORS = Registry("algo.adv_estimator", "advantage estimator")
# name -> fn(logprobs, old_logprobs, advantages, mask, *, agg, eps_low, eps_high, **kw)
#         -> (loss, metrics)
POLICY_LOSSES = Registry("algo.policy_loss", "policy loss")
# name -> fn(values[B, T], mask[B, T], *, max_len, num_tokens, num_seqs, row_tokens) -> scalar
LOSS_AGGREGATIONS = Registry("algo.loss_agg", "loss aggregation")
# name -> fn(learner_old_logprobs, sampler_logprobs, mask, episode_of, *, cap) -> weights
ROLLOUT_CORRECTIONS = Registry("algo.rollout_correction", "rollout correction")
# name -> fn(correct[G], rewards[G]) -> [(chosen, rejected)] positions within one group
PAIR_RULES = Registry("algo.dpo.pairs", "DPO pair rule")
# name -> Algorithm class (the protocol in ablate.algos.protocol)
ALGORITHMS = Registry("algo.algorithm", "algorithm")


def import_plugins(modules: Iterable[str] | None) -> None:
    """Import the user's modules (`algo.plugins`) so their @register decorators run."""
    for name in modules or ():
        try:
            importlib.import_module(str(name))
        except ImportError as e:
            raise ValueError(f"algo.plugins: cannot import {name!r} ({e})") from None
