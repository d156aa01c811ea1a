"""Validation of a mailbox and its tasks, shared by a cell's preflight and the
standalone check a user runs on their own data (docs/data.md lists the rules):

    python -m ablate.envs.email.check DATA_DIR            # emails.jsonl, train_tasks.jsonl, test_tasks.jsonl
    python -m ablate.envs.email.check --emails E --train T --test S

Record-level rules live in ablate.envs.email.data (types, dates, unique ids per file, file:line
in every message); here are the cross-checks against the built mailbox: each task's inbox
exists, each evidence email exists, belongs to that inbox and is dated strictly before
the task's query date (otherwise the task is unanswerable by construction, and a run on
it reports a silently wrong accuracy); task ids are unique across train and test; and,
given a token budget, no question is too long for the model's context.
"""
from __future__ import annotations

import argparse
import logging
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from ablate.models.budget import QuestionBudget  # noqa: F401  (re-exported)
from ablate.envs.email.data import DataFileError, Task, read_task_records
from ablate.envs.email.db import EmailDB, normalize_address

log = logging.getLogger(__name__)

FILE_NAMES = {"emails": "emails.jsonl", "train": "train_tasks.jsonl",
              "test": "test_tasks.jsonl"}


@dataclass
class DataReport:
    num_emails: int = 0
    num_inboxes: int = 0
    duplicates_skipped: int = 0
    tasks: dict = field(default_factory=dict)      # split -> count

    def summary(self) -> str:
        split = ", ".join(f"{n} {k}" for k, n in self.tasks.items())
        dup = (f"; {self.duplicates_skipped} duplicate message_id line(s) skipped (first kept)"
               if self.duplicates_skipped else "")
        return (f"{self.num_emails} emails in {self.num_inboxes} inboxes, {split} "
                f"tasks{dup}")


def check_tasks(db: EmailDB, records: list[tuple[int, Task]], path: Path) -> None:
    """Every task is answerable from its own inbox as of its query date."""
    for lineno, task in records:
        where = f"{path}:{lineno}: task {task.id!r}"
        if not db.has_inbox(task.inbox_address):
            raise DataFileError(f"{where}: field 'inbox_address' {task.inbox_address!r} "
                                "sent or received no email in the mailbox")
        inbox = normalize_address(task.inbox_address)
        for mid in task.message_ids:
            found = db.locate(mid)
            if found is None:
                raise DataFileError(f"{where}: field 'message_ids': evidence email {mid!r} "
                                    "is not in the mailbox")
            date, members = found
            if inbox not in members:
                raise DataFileError(f"{where}: field 'message_ids': evidence email {mid!r} "
                                    f"is not in inbox {task.inbox_address!r}")
            if not date < task.query_date:
                raise DataFileError(
                    f"{where}: field 'query_date' {task.query_date!r} is not after its "
                    f"evidence email {mid!r} dated {date!r} (searches see only emails "
                    "dated strictly before the query date)")


def check_unique_ids(splits: dict[str, tuple[Path, list[tuple[int, Task]]]]) -> None:
    """A task id may appear in one split only (train/test leakage otherwise)."""
    owner: dict[str, str] = {}
    for path, records in splits.values():
        for lineno, task in records:
            where = f"{path}:{lineno}"
            if task.id in owner:
                raise DataFileError(f"{where}: field 'id' {task.id!r} is also a task of "
                                    f"{owner[task.id]}")
            owner[task.id] = where


def check_questions(records: list[tuple[int, Task]], path: Path,
                    budget: QuestionBudget) -> None:
    """Reject a question the model's context cannot hold. Byte-level BPE tokens cover at
    least one byte each, so only questions longer in UTF-8 bytes than the budget are
    tokenized."""
    for lineno, task in records:
        if len(task.question.encode("utf-8", "replace")) <= budget.max_tokens:
            continue
        n = budget.count(task.question)
        if n > budget.max_tokens:
            raise DataFileError(
                f"{path}:{lineno}: field 'question' of task {task.id!r} is {n} tokens; at "
                f"most {budget.max_tokens} fit ({budget.explain})")


def load_checked(emails: Path, train: Path, test: Path, db_path: Path, *,
                 budget: QuestionBudget | None = None
                 ) -> tuple[EmailDB, list[Task], list[Task], DataReport]:
    """Build (or reuse) the mailbox database and load both task files, applying every
    check; raises DataFileError naming file:line and the field."""
    splits = {"train": (train, read_task_records(train)),
              "test": (test, read_task_records(test))}
    check_unique_ids(splits)
    if budget is not None:
        for path, records in splits.values():
            check_questions(records, path, budget)
    db = EmailDB.build(emails, db_path)
    try:
        for path, records in splits.values():
            check_tasks(db, records, path)
    except DataFileError:
        db.close()
        raise
    report = DataReport(num_emails=len(db), num_inboxes=int(db.meta["num_inboxes"]),
                        duplicates_skipped=int(db.meta.get("duplicates_skipped", 0)),
                        tasks={k: len(r) for k, (_, r) in splits.items()})
    return db, [t for _, t in splits["train"][1]], [t for _, t in splits["test"][1]], report


def _paths(args) -> dict[str, Path]:
    base = Path(args.data_dir) if args.data_dir else None
    out = {}
    for key, name in FILE_NAMES.items():
        given = getattr(args, key)
        if given is None and base is None:
            raise DataFileError(f"give DATA_DIR or --{key}")
        out[key] = Path(given) if given else base / name
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m ablate.envs.email.check",
        description="Validate an EnronHop-format mailbox and its tasks (docs/data.md).")
    ap.add_argument("data_dir", nargs="?", help="folder holding " + ", ".join(
        FILE_NAMES.values()))
    for key in FILE_NAMES:
        ap.add_argument(f"--{key}", help=f"path of the {key} file (overrides DATA_DIR)")
    args = ap.parse_args(argv)
    try:
        paths = _paths(args)
        with tempfile.TemporaryDirectory(prefix="ablate-check-") as tmp:
            db, _, _, report = load_checked(paths["emails"], paths["train"], paths["test"],
                                            Path(tmp) / "emails.sqlite")
            db.close()
    except DataFileError as exc:
        print(f"ablate.envs.email.check: error: {exc}", file=sys.stderr)
        return 1
    print(f"ablate.envs.email.check: OK: {report.summary()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
