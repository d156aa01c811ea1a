"""Records of the EnronHop task family: emails and tasks, and their JSON Lines files.

Field names follow the published EnronHop / ART-E files so a user's files load as they
are; docs/data.md lists the fields and every validation rule applied here.
"""
from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Iterator

DATE_FORMAT = "%Y-%m-%d %H:%M:%S"
# the date forms EmailDB compares as strings ('T' separator and a date alone accepted)
_DATE_RE = re.compile(r"^\d{4}-\d{2}-\d{2}(?:[ T]\d{2}:\d{2}(?::\d{2}(?:\.\d+)?)?)?$")

EMAIL_FIELDS = ("message_id", "subject", "from_address", "to_addresses", "cc_addresses",
                "bcc_addresses", "date", "body")
TASK_FIELDS = ("id", "question", "answer", "message_ids", "inbox_address", "query_date", "hops")


class DataFileError(ValueError):
    """A data file is missing, unreadable, or a record is invalid; the message names
    file:line and the field."""


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

    @property
    def prompt(self) -> str:
        """The user message of the episode: question + inbox address + today's date."""
        date = str(self.query_date)
        if re.match(r"^\d{4}-\d{2}-\d{2}", date):
            date = date[:10]             # a user says the day, not the second
        return (f"{self.question}\n\nMy email address is {self.inbox_address}. "
                f"Today's date is {date}.")

    @property
    def difficulty(self) -> int:
        """The generic Task's difficulty (ablate/protocol/task.py): EnronHop's hops."""
        return self.hops

    def to_json(self) -> dict:
        d = asdict(self)
        extra = d.pop("extra")
        d.update(extra)
        return d


def _lines(path: Path, kind: str) -> Iterator[tuple[int, str]]:
    """(line number, text) of each non-blank line; bytes that are not UTF-8 are an error
    naming file:line (decoded line by line, so the line number is exact)."""
    if not path.is_file():
        raise DataFileError(f"{kind} file not found: {path}")
    with path.open("rb") as fh:
        for lineno, raw in enumerate(fh, 1):
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise DataFileError(f"{path}:{lineno}: not UTF-8 text (byte {exc.start + 1}: "
                                    f"{raw[exc.start:exc.start + 1]!r}); save the file "
                                    "as UTF-8") from None
            if line.strip():
                yield lineno, line


def _records(path: str | Path, required: tuple[str, ...], kind: str
             ) -> Iterator[tuple[int, dict]]:
    """(line number, JSON object) of each record, or DataFileError naming file:line."""
    path = Path(path)
    count = 0
    for lineno, line in _lines(path, kind):
        try:
            rec = json.loads(line)
        except (json.JSONDecodeError, RecursionError) as exc:
            why = exc.msg if isinstance(exc, json.JSONDecodeError) else "nested too deeply"
            raise DataFileError(f"{path}:{lineno}: not valid JSON ({why})") from None
        if not isinstance(rec, dict):
            raise DataFileError(f"{path}:{lineno}: expected a JSON object, got "
                                f"{_type(rec)}")
        missing = [f for f in required if f not in rec]
        if missing:
            raise DataFileError(
                f"{path}:{lineno}: {kind} record lacks field(s) {missing}; "
                f"required: {list(required)}")
        count += 1
        yield lineno, rec
    if count == 0:
        raise DataFileError(f"{path}: no {kind} records (the file is empty); see "
                            "docs/data.md for the format")


def _type(value) -> str:
    return "null" if value is None else type(value).__name__


class _Fields:
    """Typed access to one record's fields; every error names file:line and the field."""

    def __init__(self, rec: dict, where: str):
        self.rec, self.where = rec, where

    def fail(self, name: str, why: str) -> DataFileError:
        return DataFileError(f"{self.where}: field {name!r} {why}")

    def text(self, name: str, *, required: bool = True, null_ok: bool = False) -> str:
        """A string; null reads as "" when `null_ok`; empty refused when `required`."""
        value = self.rec[name]
        if value is None and null_ok:
            return ""
        if not isinstance(value, str):
            raise self.fail(name, f"must be a string, got {_type(value)} "
                                  f"{_short(value)}")
        if required and not value.strip():
            raise self.fail(name, "must not be empty")
        return value

    def strings(self, name: str, *, required: bool = False) -> list[str]:
        """A list of strings; null is [] and a single string a one-item list (some
        exports store a lone address that way)."""
        value = self.rec[name]
        if value is None:
            value = []
        elif isinstance(value, str):
            value = [value] if value else []
        if not isinstance(value, list):
            raise self.fail(name, f"must be a list of strings, got {_type(value)}")
        bad = [v for v in value if not isinstance(v, str) or not v.strip()]
        if bad:
            raise self.fail(name, f"must hold non-empty strings, got {_short(bad[0])}")
        if required and not value:
            raise self.fail(name, "must list at least one id")
        return value

    def date(self, name: str) -> str:
        value = self.rec[name]
        if not isinstance(value, str) or not _DATE_RE.match(value.strip()):
            raise self.fail(name, f"must be a date 'YYYY-MM-DD HH:MM:SS', got "
                                  f"{_short(value)}")
        return value.strip().replace("T", " ")

    def positive_int(self, name: str) -> int:
        value = self.rec[name]
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise self.fail(name, f"must be a positive integer, got {_short(value)}")
        return value


def _short(value, limit: int = 40) -> str:
    text = json.dumps(value, ensure_ascii=False) if not isinstance(value, str) else repr(value)
    return text if len(text) <= limit else text[:limit] + "…"


def read_email_records(path: str | Path) -> Iterator[tuple[int, Email]]:
    """(line number, Email) of each record of an emails JSONL file, validated."""
    for lineno, rec in _records(path, EMAIL_FIELDS, "emails"):
        f = _Fields(rec, f"{path}:{lineno}")
        yield lineno, Email(
            message_id=f.text("message_id"), subject=f.text("subject", required=False,
                                                              null_ok=True),
            from_address=f.text("from_address", required=False, null_ok=True),
            to_addresses=f.strings("to_addresses"), cc_addresses=f.strings("cc_addresses"),
            bcc_addresses=f.strings("bcc_addresses"), date=f.date("date"),
            body=f.text("body", required=False, null_ok=True))


def read_emails(path: str | Path) -> Iterator[Email]:
    for _, email in read_email_records(path):
        yield email


def read_task_records(path: str | Path) -> list[tuple[int, Task]]:
    """(line number, Task) of each record of a tasks JSONL file, validated field by
    field; task ids must be unique within the file."""
    out, seen = [], {}
    for lineno, rec in _records(path, TASK_FIELDS, "tasks"):
        f = _Fields(rec, f"{path}:{lineno}")
        task = Task(
            id=f.text("id"), question=f.text("question"), answer=f.text("answer"),
            message_ids=f.strings("message_ids", required=True),
            inbox_address=f.text("inbox_address"), query_date=f.date("query_date"),
            hops=f.positive_int("hops"),
            extra={k: v for k, v in rec.items() if k not in TASK_FIELDS})
        if task.hops != len(task.message_ids):
            raise f.fail("hops", f"is {task.hops} but message_ids lists "
                                 f"{len(task.message_ids)} evidence email(s)")
        if task.id in seen:
            raise f.fail("id", f"{task.id!r} repeats the task id of line {seen[task.id]}")
        seen[task.id] = lineno
        out.append((lineno, task))
    return out


def read_tasks(path: str | Path) -> list[Task]:
    return [task for _, task in read_task_records(path)]


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
