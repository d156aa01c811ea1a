"""Build or load a cell's environment: the mailbox database and the train/test tasks.

The synthetic mailbox is generated once per generator setting into the cache directory
(keyed by a hash of the settings) and reused by every cell; the database is cached by the
content hash of emails.jsonl (EmailDB.build). A file lock serialises concurrent cells.
"""
from __future__ import annotations

import fcntl
import hashlib
import json
import os
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from ablate.env.data import Task, read_tasks


@dataclass
class EnvBundle:
    db: object                      # ablate.env.db.EmailDB
    train_tasks: list[Task]
    test_tasks: list[Task]
    max_results: int
    root: Path

    def toolbox(self, task: Task):
        from ablate.env.tools import ToolBox
        return ToolBox(self.db, task.inbox_address, task.query_date, max_results=self.max_results)


@contextmanager
def file_lock(path: Path):
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


SYNTHETIC_KEYS = ("gen_seed", "num_inboxes", "emails_per_inbox", "train_tasks", "test_tasks",
                  "max_hops")


def synthetic_files(env_cfg, cache_dir: Path) -> dict[str, Path]:
    """Generate (once) the synthetic mailbox for these settings; return its file paths."""
    from ablate.env import synthetic

    params = {k: env_cfg[k] for k in SYNTHETIC_KEYS}
    params["generator_version"] = getattr(synthetic, "GENERATOR_VERSION", 1)
    key = hashlib.sha256(json.dumps(params, sort_keys=True).encode()).hexdigest()[:16]
    root = cache_dir / "synthetic" / key
    names = {"emails": "emails.jsonl", "train_tasks": "train_tasks.jsonl",
             "test_tasks": "test_tasks.jsonl"}
    done = root / "DONE"
    with file_lock(cache_dir / "synthetic" / f"{key}.lock"):
        if not done.exists():
            synthetic.generate(
                root, seed=env_cfg.gen_seed, num_inboxes=env_cfg.num_inboxes,
                emails_per_inbox=env_cfg.emails_per_inbox, train_tasks=env_cfg.train_tasks,
                test_tasks=env_cfg.test_tasks, max_hops=env_cfg.max_hops)
            (root / "params.json").write_text(json.dumps(params, indent=2))
            done.write_text("")
    return {k: root / v for k, v in names.items()}


def build_env(cfg) -> EnvBundle:
    from ablate.env.db import EmailDB

    env_cfg = cfg.env
    cache_dir = Path(os.path.expanduser(env_cfg.cache_dir))
    if env_cfg.name == "synthetic":
        files = synthetic_files(env_cfg, cache_dir)
    else:  # enronhop: the user's files, validated by ablate.cli.check_runtime
        files = {"emails": Path(os.path.expanduser(env_cfg.emails_path)),
                 "train_tasks": Path(os.path.expanduser(env_cfg.train_tasks_path)),
                 "test_tasks": Path(os.path.expanduser(env_cfg.test_tasks_path))}
    digest = hashlib.sha256(str(files["emails"].resolve()).encode()).hexdigest()[:16]
    db_path = cache_dir / "db" / f"{digest}.sqlite"
    with file_lock(db_path.with_suffix(".lock")):
        db = EmailDB.build(files["emails"], db_path)
    return EnvBundle(db=db, train_tasks=read_tasks(files["train_tasks"]),
                     test_tasks=read_tasks(files["test_tasks"]),
                     max_results=env_cfg.max_results, root=files["emails"].parent)
