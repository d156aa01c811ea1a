"""`ablate.env`: the email task's historical import path, kept as an alias.

The email task (EmailDB, ToolBox, judges, records, synthetic mailbox, scripted agent) lives
in ablate.envs.email; `ablate.env` and every `ablate.env.<module>` name the same module
objects, so `from ablate.env import EmailDB` and `from ablate.env.db import EmailDB` keep
working (docs/environments.md)."""
import importlib
import sys

from ablate.envs.email import *  # noqa: F401,F403
from ablate.envs.email import __all__  # noqa: F401

_MODULES = ("bundle", "check", "config", "data", "db", "judge", "scripted", "synthetic",
            "tools")
for _name in _MODULES:
    _module = importlib.import_module(f"ablate.envs.email.{_name}")
    sys.modules[f"{__name__}.{_name}"] = _module
    globals()[_name] = _module
