"""A user's own environment, outside the ablate package (docs/environments.md)."""
