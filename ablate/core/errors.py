"""Errors every layer may raise."""


class ConfigError(ValueError):
    """A configuration value is invalid; the message names the key and what is allowed."""
