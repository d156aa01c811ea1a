"""Bad data files fail in preflight, before any cell directory exists: one line naming
file:line and the field, exit code 2, no traceback (docs/data.md lists the rules).

Every case starts from a clean synthetic mailbox (which passes) and breaks one thing."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ablate.apps.cli import main
from ablate.envs.email import synthetic
from ablate.envs.email.check import main as check_main
from ablate.envs.email.data import DataFileError, read_emails


@pytest.fixture(scope="module")
def clean(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("clean")
    synthetic.generate(root, seed=3, num_inboxes=4, emails_per_inbox=30, train_tasks=12,
                       test_tasks=6, max_hops=2)
    return root


def lines(path: Path) -> list[str]:
    return path.read_text(encoding="utf-8").splitlines(keepends=True)


def recs(path: Path) -> list[dict]:
    return [json.loads(x) for x in lines(path)]


def dump(records) -> str:
    return "".join(json.dumps(r) + "\n" for r in records)


def edit(records: list[dict], index: int, **fields) -> list[dict]:
    out = [dict(r) for r in records]
    out[index].update(fields)
    return out


def other_inbox_email(clean: Path, task: dict) -> str:
    """A message id of an email the task's inbox neither sent nor received."""
    me = task["inbox_address"].lower()
    for e in read_emails(clean / "emails.jsonl"):
        people = [e.from_address, *e.to_addresses, *e.cc_addresses, *e.bcc_addresses]
        if me not in (p.lower() for p in people):
            return e.message_id
    raise AssertionError("no foreign email")


def evidence_date(clean: Path, mid: str) -> str:
    return next(e.date for e in read_emails(clean / "emails.jsonl") if e.message_id == mid)


# name -> (file to replace, builder(clean) -> new text or bytes, line, text in the message)
def cases():
    E, TR, TE = "emails", "train", "test"

    def em(i, **kw):
        return lambda c: dump(edit(recs(c / "emails.jsonl"), i, **kw))

    def tr(i, **kw):
        return lambda c: dump(edit(recs(c / "train_tasks.jsonl"), i, **kw))

    def drop(i, key):
        def build(c):
            rs = recs(c / "train_tasks.jsonl")
            rs[i].pop(key)
            return dump(rs)
        return build

    def raw_line(name, i, text):
        def build(c):
            ls = lines(c / name)
            ls[i] = text
            return "".join(ls) if isinstance(text, str) else b"".join(
                x.encode() for x in ls[:i]) + text + b"".join(x.encode() for x in ls[i + 1:])
        return build

    def foreign(c):
        rs = recs(c / "train_tasks.jsonl")
        rs[1]["message_ids"] = rs[1]["message_ids"][:-1] + [other_inbox_email(c, rs[1])]
        return dump(rs)

    def too_early(c):
        rs = recs(c / "train_tasks.jsonl")
        rs[2]["query_date"] = evidence_date(c, rs[2]["message_ids"][-1])
        return dump(rs)

    def dup_id(c):
        rs = recs(c / "train_tasks.jsonl")
        rs[3]["id"] = rs[0]["id"]
        return dump(rs)

    def cross_dup(c):
        rs = recs(c / "test_tasks.jsonl")
        rs[1]["id"] = recs(c / "train_tasks.jsonl")[0]["id"]
        return dump(rs)

    def hops_mismatch(c):
        rs = recs(c / "train_tasks.jsonl")
        rs[1]["hops"] = len(rs[1]["message_ids"]) + 1
        return dump(rs)

    def null_ids(c):
        rs = recs(c / "emails.jsonl")
        rs[0]["message_id"] = rs[1]["message_id"] = None
        return dump(rs)

    return {
        "emails empty": (E, lambda c: "", None, "no emails records"),
        "emails blank lines only": (E, lambda c: "\n\n  \n", None, "no emails records"),
        "emails not utf8": (E, raw_line("emails.jsonl", 2, b'{"message_id": "\xff\xfe"}\n'),
                            3, "not UTF-8"),
        "emails broken json": (E, raw_line("emails.jsonl", 4, '{"message_id": \n'), 5,
                               "not valid JSON"),
        "emails array line": (E, raw_line("emails.jsonl", 1, "[1, 2]\n"), 2,
                              "expected a JSON object"),
        "emails missing date": (E, raw_line("emails.jsonl", 0, json.dumps(
            {"message_id": "<x>", "subject": "", "from_address": "a@b", "to_addresses": [],
             "cc_addresses": [], "bcc_addresses": [], "body": ""}) + "\n"), 1, "lacks field"),
        "emails message_id int": (E, em(3, message_id=12345), 4, "'message_id' must be a string"),
        "emails message_id null": (E, em(0, message_id=None), 1, "'message_id' must be a string"),
        "emails two null ids": (E, null_ids, 1, "'message_id'"),
        "emails message_id empty": (E, em(2, message_id="  "), 3, "'message_id' must not be empty"),
        "emails subject dict": (E, em(5, subject={"a": 1}), 6, "'subject' must be a string"),
        "emails body list": (E, em(6, body=["x"]), 7, "'body' must be a string"),
        "emails date word": (E, em(7, date="soon"), 8, "'date' must be a date"),
        "emails date number": (E, em(8, date=20010101), 9, "'date' must be a date"),
        "emails to int": (E, em(9, to_addresses=7), 10, "'to_addresses' must be a list"),
        "emails cc non-strings": (E, em(10, cc_addresses=[1, 2]), 11, "'cc_addresses'"),
        "tasks empty train": (TR, lambda c: "", None, "no tasks records"),
        "tasks empty test": (TE, lambda c: "", None, "no tasks records"),
        "tasks not utf8": (TR, raw_line("train_tasks.jsonl", 1, b'{"id": "\xc3\x28"}\n'), 2,
                           "not UTF-8"),
        "tasks broken json": (TR, raw_line("train_tasks.jsonl", 2, "{oops\n"), 3,
                              "not valid JSON"),
        "tasks string line": (TR, raw_line("train_tasks.jsonl", 0, '"a task"\n'), 1,
                              "expected a JSON object"),
        "tasks missing hops": (TR, drop(1, "hops"), 2, "lacks field"),
        "tasks answer null": (TR, tr(0, answer=None), 1, "'answer' must be a string"),
        "tasks answer empty": (TR, tr(1, answer=""), 2, "'answer' must not be empty"),
        "tasks hops float": (TR, tr(2, hops=2.7), 3, "'hops' must be a positive integer"),
        "tasks hops word": (TR, tr(3, hops="two"), 4, "'hops' must be a positive integer"),
        "tasks hops zero": (TR, tr(4, hops=0), 5, "'hops' must be a positive integer"),
        "tasks hops bool": (TR, tr(4, hops=True), 5, "'hops' must be a positive integer"),
        "tasks hops mismatch": (TR, hops_mismatch, 2, "'hops' is"),
        "tasks no evidence": (TR, tr(5, message_ids=[], hops=1), 6, "'message_ids'"),
        "tasks evidence missing": (TR, tr(0, message_ids=["<nope@x>"], hops=1), 1,
                                   "not in the mailbox"),
        "tasks evidence other inbox": (TR, foreign, 2, "is not in inbox"),
        "tasks query before evidence": (TR, too_early, 3, "'query_date'"),
        "tasks query_date word": (TR, tr(1, query_date="yesterday"), 2, "'query_date'"),
        "tasks unknown inbox": (TR, tr(2, inbox_address="nobody@nowhere.example"), 3,
                                "'inbox_address'"),
        "tasks inbox null": (TR, tr(2, inbox_address=None), 3, "'inbox_address'"),
        "tasks duplicate id": (TR, dup_id, 4, "repeats the task id of line 1"),
        "tasks id in train and test": (TE, cross_dup, 2, "is also a task of"),
        "tasks id int": (TR, tr(0, id=12345), 1, "'id' must be a string"),
        "tasks question dict": (TR, tr(1, question={"q": 1}), 2, "'question' must be a string"),
        "tasks question too long": (TR, tr(1, question="budget " * 200_000), 2,
                                    "'question' of task"),
    }


CASES = cases()
FILES = {"emails": "emails.jsonl", "train": "train_tasks.jsonl", "test": "test_tasks.jsonl"}


def dataset(clean: Path, root: Path, which: str, build) -> dict[str, Path]:
    root.mkdir(parents=True, exist_ok=True)
    paths = {}
    for key, name in FILES.items():
        paths[key] = root / name
        content = build(clean) if key == which else (clean / name).read_bytes()
        if isinstance(content, str):
            content = content.encode("utf-8")
        paths[key].write_bytes(content)
    return paths


def argv(paths: dict[str, Path], tmp: Path) -> list[str]:
    return ["env=enronhop", f"env.emails_path={paths['emails']}",
            f"env.train_tasks_path={paths['train']}", f"env.test_tasks_path={paths['test']}",
            f"env.cache_dir={tmp / 'cache'}", f"hydra.run.dir={tmp / 'cell'}"]


def test_the_clean_dataset_passes(clean, tmp_path, capsys):
    assert len(CASES) >= 30
    paths = dataset(clean, tmp_path / "d", "none", None)
    from ablate.apps.cli import preflight
    assert preflight(argv(paths, tmp_path)) == 0, capsys.readouterr().err
    assert check_main([str(tmp_path / "d")]) == 0
    assert "OK: 120 emails" in capsys.readouterr().out


@pytest.mark.parametrize("name", list(CASES))
def test_bad_data_fails_in_preflight(name, clean, tmp_path, capsys):
    which, build, line, needle = CASES[name]
    paths = dataset(clean, tmp_path / "d", which, build)
    with pytest.raises(SystemExit) as exc:
        main(argv(paths, tmp_path))
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("ablate: error: "), err
    where = f"{paths[which]}:{line}:" if line else f"{paths[which]}:"
    assert where in err and needle in err, err
    assert "Traceback" not in err
    assert not (tmp_path / "cell").exists()
    # the standalone check agrees (the too-long question needs a model: preflight only)
    if name != "tasks question too long":
        assert check_main([str(tmp_path / "d")]) == 1
        assert needle in capsys.readouterr().err


def test_duplicate_message_ids_are_skipped_with_a_count(clean, tmp_path, capsys, caplog):
    rs = recs(clean / "emails.jsonl")
    imposter = dict(rs[0], subject="imposter")
    text = dump(rs[:5] + [imposter] + rs[5:] + [dict(rs[7], body="again")])
    (tmp_path / "d").mkdir()
    for name in ("train_tasks.jsonl", "test_tasks.jsonl"):
        (tmp_path / "d" / name).write_bytes((clean / name).read_bytes())
    (tmp_path / "d" / "emails.jsonl").write_text(text)
    assert check_main([str(tmp_path / "d")]) == 0
    out = capsys.readouterr().out
    assert "120 emails" in out and "2 duplicate message_id line(s) skipped" in out


def test_missing_file_names_the_key(clean, tmp_path, capsys):
    paths = dataset(clean, tmp_path / "d", "none", None)
    paths["test"] = tmp_path / "d"               # a directory, not a file
    with pytest.raises(SystemExit):
        main(argv(paths, tmp_path))
    err = capsys.readouterr().err
    assert "env.test_tasks_path=" in err and "file not found" in err


def test_real_cli_on_bad_data_has_no_traceback(clean, tmp_path):
    which, build, line, needle = CASES["tasks evidence missing"]
    paths = dataset(clean, tmp_path / "d", which, build)
    env = dict(os.environ, WANDB_MODE="disabled")
    proc = subprocess.run([sys.executable, "-m", "ablate", *argv(paths, tmp_path)],
                          capture_output=True, text=True, cwd=tmp_path, env=env, timeout=300)
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1 and needle in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr + proc.stdout
    assert not (tmp_path / "cell").exists() and not (tmp_path / "outputs").exists()
    check = subprocess.run([sys.executable, "-m", "ablate.envs.email.check", str(tmp_path / "d")],
                           capture_output=True, text=True, env=env, timeout=300)
    assert check.returncode == 1 and f"{paths['train']}:1:" in check.stderr


def test_reader_errors_are_data_file_errors(tmp_path):
    bad = tmp_path / "e.jsonl"
    bad.write_bytes(b'{"message_id": "\xff"}\n')
    with pytest.raises(DataFileError, match=r"e.jsonl:1: not UTF-8"):
        list(read_emails(bad))
