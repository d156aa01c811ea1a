"""ablate: reward and algorithm ablations for agentic RL of language models.

One episode flows: conf/ (Hydra) -> ablate.config -> ablate.env (EmailDB, tools, judge) ->
ablate.harness (chat format, rollout) with ablate.samplers -> ablate.rewards ->
ablate.algos (advantages, losses) -> ablate.learners (update) -> ablate.cell (the loop)."""
__version__ = "0.1.0"
