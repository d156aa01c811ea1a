"""Recipes that build assets: the tiny model's training and warm starts, SmolLM2's warm
start, supervised fine-tuning. A recipe may import any layer; nothing in ablate imports a
recipe (loading a model never imports an environment)."""
