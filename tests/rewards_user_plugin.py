"""A user's own reward scheme, registered from outside the ablate package the documented
way (docs/rewards.md): component functions `fn(episode, cfg) -> float` in a Rubric,
registered in REWARDS. tests/rewards/test_rewards.py selects it with
`plugins=[rewards_user_plugin] reward.name=per_call_cost`."""
from ablate.rewards import REWARDS, Rubric, correct

COST = 0.01


def call_cost(episode, cfg) -> float:
    """-0.01 per tool call, malformed ones included."""
    return -COST * len(episode.results)


REWARDS.register("per_call_cost", Rubric(correct, call_cost,
                                         doc="1 if correct, -0.01 per tool call"))
