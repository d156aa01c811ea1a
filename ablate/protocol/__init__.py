"""The episode protocol every layer above reads: a Task and each ToolResult (task.py), the
Environment a world implements (environment.py), the `env` keys every world has
(config.py), a scripted Trajectory (trajectory.py) and the Rubric a reward scheme is made
of (rubric.py). It sits below the domain packages (harness, rewards, algos, agents, the
worlds) and above ablate.core; it imports nothing else of ablate (setup.cfg's layer
chain). The registries of names live with their axes (ablate.envs.registry, ...)."""
