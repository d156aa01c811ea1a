"""`env=reasoning_gym`: reasoning-gym's procedural datasets (with their own scorers) as an
ablate environment. Needs the optional extra `pip install 'ablate[reasoning-gym]'`;
importing this package does not (the class registers either way).

    env.py         ReasoningGymEnv: tasks from disjoint generator seeds, score_answer judge
    calculator.py  the optional `calculator` tool (ast-based, bounded; no eval)
    rewards.py     outcome, rg_score (the dataset's score as the reward)
"""
from ablate.envs.reasoning_gym.env import ReasoningGymEnv

__all__ = ["ReasoningGymEnv"]
