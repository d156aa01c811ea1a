"""Errors of model loading."""


class ModelNotFoundError(FileNotFoundError):
    """The weights are not on this machine; the message says where to put them."""
