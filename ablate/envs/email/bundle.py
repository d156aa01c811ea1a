"""Build or load a cell's environment: the mailbox database and the train/test tasks.

The synthetic mailbox is generated once per generator setting into the cache directory
(keyed by a hash of the settings) and reused by every cell; the database is cached by the
content hash of emails.jsonl (EmailDB.build). A file lock serialises concurrent cells.
"""
from __future__ import annotations

import hashlib
import json
import logging
import os
from dataclasses import dataclass
from pathlib import Path

from ablate.core.locks import file_lock
from ablate.envs.email import synthetic
from ablate.envs.email.check import load_checked
from ablate.envs.email.data import Task
from ablate.envs.email.tools import SYSTEM_PROMPT, TOOL_SCHEMAS, ToolBox
from ablate.models.budget import check_weights, question_budget

log = logging.getLogger(__name__)


@dataclass
class EnvBundle:
    db: object                      # ablate.envs.email.db.EmailDB
    train_tasks: list[Task]
    test_tasks: list[Task]
    max_results: int
    root: Path
    report: object = None           # ablate.envs.email.check.DataReport: counts, lines skipped
    max_read_chars: int | None = None   # read_email body limit (env.max_read_chars)

    def toolbox(self, task: Task):
        return ToolBox(self.db, task.inbox_address, task.query_date, max_results=self.max_results,
                       max_read_chars=self.max_read_chars)


SYNTHETIC_KEYS = ("gen_seed", "num_inboxes", "emails_per_inbox", "train_tasks", "test_tasks",
                  "max_hops")


def synthetic_files(env_cfg, cache_dir: Path) -> dict[str, Path]:
    """Generate (once) the synthetic mailbox for these settings; return its file paths."""

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


def env_files(cfg) -> dict[str, Path]:
    """emails / train_tasks / test_tasks paths of the configured environment (the
    synthetic mailbox is generated into the cache on first use)."""
    env_cfg = cfg.env
    if env_cfg.name == "synthetic":
        return synthetic_files(env_cfg, Path(os.path.expanduser(env_cfg.cache_dir)))
    return {"emails": Path(os.path.expanduser(env_cfg.emails_path)),
            "train_tasks": Path(os.path.expanduser(env_cfg.train_tasks_path)),
            "test_tasks": Path(os.path.expanduser(env_cfg.test_tasks_path))}


def db_path_for(cfg, emails: Path) -> Path:
    digest = hashlib.sha256(str(emails.resolve()).encode()).hexdigest()[:16]
    return Path(os.path.expanduser(cfg.env.cache_dir)) / "db" / f"{digest}.sqlite"


def build_env(cfg, budget=None) -> EnvBundle:
    """The validated environment (ablate.envs.email.check.load_checked: a bad record raises
    DataFileError naming file:line); questions are bounded by `budget` (a
    QuestionBudget; by default the one of cfg's model, ablate.models.budget)."""

    if budget is None:
        budget = question_budget(cfg, check_weights(cfg),
                                 SYSTEM_PROMPT + json.dumps(TOOL_SCHEMAS))
    files = env_files(cfg)
    db_path = db_path_for(cfg, files["emails"])
    with file_lock(db_path.with_suffix(".lock")):
        db, train, test, report = load_checked(files["emails"], files["train_tasks"],
                                               files["test_tasks"], db_path, budget=budget)
    log.info("environment %s: %s", cfg.env.name, report.summary())
    if report.duplicates_skipped:
        log.warning("%s: %d duplicate message_id line(s) skipped (first kept)",
                    files["emails"], report.duplicates_skipped)
    return EnvBundle(db=db, train_tasks=train, test_tasks=test,
                     max_results=cfg.env.max_results, root=files["emails"].parent,
                     report=report, max_read_chars=cfg.env.max_read_chars)
