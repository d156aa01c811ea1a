"""The `env` keys every environment has. An environment's own keys live in its own schema,
a subclass of EnvConfig that the environment names as `config_schema` (the email task's:
ablate/envs/email/config.py; code repair's: ablate/envs/coderepair/config.py); its
conf/env/<name>.yaml selects it with `defaults: [<name>_schema]`. A user's environment
without a schema of its own takes its constructor's arguments under `env.options`
(docs/environments.md)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional


@dataclass
class EnvConfig:
    name: str = "synthetic"              # a registered environment (ablate.envs.env_names())
    _target_: Optional[str] = None       # a user's Environment class, `my_module.MyEnv`
    options: dict[str, Any] = field(default_factory=dict)   # more constructor arguments
    max_turns: int = 10                  # tool-calling turns before the episode is cut
    cache_dir: str = "${oc.env:ABLATE_CACHE,'~/.cache/ablate'}"  # expanded with os.path.expanduser
