"""Comments, docstrings and docs cite papers or files of this repository: a reference to
a file that is not in the repository (the team's notes, a path that moved) fails here."""
from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SCANNED = ("ablate", "analysis", "conf", "docs", "experiments", "sweeps", "benchmarks",
           "README.md", "setup.cfg", "setup.py")
SUFFIXES = {".py", ".yaml", ".md", ".cfg", ".sh"}
# notes that exist only outside the repository
FOREIGN = re.compile(r"DESIGN(\.md)?\s*§|PLATFORM(\.md| notes)|\.\./shared|shared/(DESIGN|PLATFORM)"
                     r"|seed article|seed 00\d")
# repository paths named in text: docs/x.md, ablate/a/b.py, tests/..., benchmarks/...
PATH = re.compile(r"(?<![\w/.])((?:docs|ablate|analysis|conf|experiments|sweeps|benchmarks|"
                  r"tests)/[\w./-]*\w\.(?:md|py|yaml|sh|jsonl?))\b")
# a report's Deviations list quotes commit subjects: history, whose paths may have moved since
COMMIT_LINE = re.compile(r"^- [0-9a-f]{10} ")


def files():
    for name in SCANNED:
        p = REPO / name
        yield from ([p] if p.is_file() else
                    (f for f in p.rglob("*") if f.suffix in SUFFIXES and f.is_file()))


def test_no_references_to_notes_outside_the_repository():
    bad = [f"{f.relative_to(REPO)}:{i}: {line.strip()[:80]}"
           for f in files() for i, line in enumerate(f.read_text().splitlines(), 1)
           if FOREIGN.search(line) and f.name != "test_docs_references.py"]
    assert not bad, "\n".join(bad)


def test_named_repository_files_exist():
    missing = []
    for f in files():
        for i, line in enumerate(f.read_text().splitlines(), 1):
            if COMMIT_LINE.match(line):
                continue
            for ref in PATH.findall(line):
                if "*" in ref or "<" in ref or not ref.strip("/"):
                    continue
                if not (REPO / ref).exists():
                    missing.append(f"{f.relative_to(REPO)}:{i}: {ref}")
    assert not missing, "\n".join(missing)
