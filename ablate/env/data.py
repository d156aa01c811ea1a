"""Records of the EnronHop task family: emails and tasks, and their JSON Lines files.

Field names follow the published EnronHop / ART-E files (DESIGN.md §5) so a user's
files load as they are.
"""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Iterator

DATE_FORMAT = "%Y-%m-%d %H:%M:%S"

EMAIL_FIELDS = ("message_id", "subject", "from_address", "to_addresses", "cc_addresses",
                "bcc_addresses", "date", "body")
TASK_FIELDS = ("id", "question", "answer", "message_ids", "inbox_address", "query_date", "hops")


class DataFileError(ValueError):
    """A data file is missing, unreadable, or a record lacks a required field."""


@dataclass(frozen=True)
class Email:
    message_id: str
    subject: str
    from_address: str
    to_addresses: list[str]
    cc_addresses: list[str]
    bcc_addresses: list[str]
    date: str  # "YYYY-MM-DD HH:MM:SS"
    body: str

    def to_json(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class Task:
    id: str
    question: str
    answer: str
    message_ids: list[str]  # evidence, in hop order; the answer sits in the last one
    inbox_address: str
    query_date: str  # searches only see emails dated strictly before this
    hops: int
    extra: dict = field(default_factory=dict, compare=False)  # unknown fields kept, not used

    def to_json(self) -> dict:
        d = asdict(self)
        extra = d.pop("extra")
        d.update(extra)
        return d


def _records(path: str | Path, required: tuple[str, ...], kind: str) -> Iterator[dict]:
    path = Path(path)
    if not path.is_file():
        raise DataFileError(f"{kind} file not found: {path}")
    with path.open(encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
            except json.JSONDecodeError as exc:
                raise DataFileError(f"{path}:{lineno}: not valid JSON ({exc.msg})") from None
            if not isinstance(rec, dict):
                raise DataFileError(f"{path}:{lineno}: expected a JSON object")
            missing = [f for f in required if f not in rec]
            if missing:
                raise DataFileError(
                    f"{path}:{lineno}: {kind} record lacks field(s) {missing}; "
                    f"required: {list(required)}")
            yield rec


def _as_list(value, path, lineno_hint: str) -> list[str]:
    if value is None:
        return []
    if isinstance(value, str):  # some exports store a single address as a string
        return [value] if value else []
    if not isinstance(value, list):
        raise DataFileError(f"{path}: {lineno_hint} must be a list, got {type(value).__name__}")
    return [str(v) for v in value]


def read_emails(path: str | Path) -> Iterator[Email]:
    for rec in _records(path, EMAIL_FIELDS, "emails"):
        yield Email(
            message_id=str(rec["message_id"]), subject=str(rec["subject"] or ""),
            from_address=str(rec["from_address"] or ""),
            to_addresses=_as_list(rec["to_addresses"], path, "to_addresses"),
            cc_addresses=_as_list(rec["cc_addresses"], path, "cc_addresses"),
            bcc_addresses=_as_list(rec["bcc_addresses"], path, "bcc_addresses"),
            date=str(rec["date"]), body=str(rec["body"] or ""))


def read_tasks(path: str | Path) -> list[Task]:
    tasks = []
    for rec in _records(path, TASK_FIELDS, "tasks"):
        extra = {k: v for k, v in rec.items() if k not in TASK_FIELDS}
        tasks.append(Task(
            id=str(rec["id"]), question=str(rec["question"]), answer=str(rec["answer"]),
            message_ids=_as_list(rec["message_ids"], path, "message_ids"),
            inbox_address=str(rec["inbox_address"]), query_date=str(rec["query_date"]),
            hops=int(rec["hops"]), extra=extra))
    return tasks


def write_jsonl(path: str | Path, records) -> None:
    """Write records (dicts or objects with to_json) atomically: temp file, then rename."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    with tmp.open("w", encoding="utf-8") as fh:
        for rec in records:
            rec = rec.to_json() if hasattr(rec, "to_json") else rec
            fh.write(json.dumps(rec, ensure_ascii=False) + "\n")
    tmp.replace(path)
