"""ablate's Hydra launcher `hydra/launcher=pack` (docs/packs.md). `hydra_plugins` itself
is a namespace package (no __init__.py), where Hydra 1.3 looks for plugins."""
