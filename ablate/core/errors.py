"""Errors every layer may raise."""


class ConfigError(ValueError):
    """A configuration value is invalid; the message names the key and what is allowed."""


def need(ok: bool, key: str, value, allowed: str) -> None:
    """One check: `key=value` fails unless `ok`; the message says what is allowed."""
    if not ok:
        raise ConfigError(f"{key}={value!r} is not allowed; {allowed}")


class OutputWriteError(OSError):
    """A cell's output could not be written (disk full, read-only, quota); the message
    names the path and the free space left there."""


def write_error(path, exc: BaseException) -> "OutputWriteError":
    """One line for a failed write of `path`: why, and the free space of its file system."""
    import os
    import shutil
    probe = os.path.abspath(str(path))
    while probe and not os.path.exists(probe):
        probe = os.path.dirname(probe)
    try:
        free = f"{shutil.disk_usage(probe).free / 2**20:.1f} MiB free there"
    except OSError:
        free = "free space unknown"
    why = getattr(exc, "strerror", None) or (str(exc).splitlines() or [type(exc).__name__])[0]
    return OutputWriteError(f"cannot write {path}: {why} ({free}); free space or give a "
                            "writable output directory, then re-run to resume")
