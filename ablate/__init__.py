"""ablate: reward and algorithm ablations for agentic RL of language models.

Layers, each importing only the ones below it (docs/architecture.md; checked by
import-linter, setup.cfg):

    apps/      the commands (python -m ablate, ablate.search, ablate.progress)
    loop/      the cell: policy, scoring, outputs, tracking, async rollouts
    envs/ rewards/ algos/ agents/ harness/ models/ samplers/ learners/   (domain)
    core/      registry, seeding, locks, errors

recipes/ (asset builds: tiny model, warm starts) may import anything; nothing imports it.
"""
__version__ = "0.1.0"
