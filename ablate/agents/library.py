"""agent=voyager's skill library: verified skills in SQLite, searched with FTS5's BM25.

The library of Voyager (Wang et al., 2023, arXiv:2305.16291, §2.2) keeps each verified
skill with its description and retrieves the top-k for a new task by the similarity of
the task to the skills' descriptions (the paper embeds them; here FTS5's `bm25()`, the
engine of our email search, over a skill's name, its docstring and the descriptions of
the tasks it solved; Porter-stemmed, so "budgets" finds "budget").

With an embedder (ablate/agents/embedding.py, `agent.voyager.embedding`) each solved
task's description also gets a dense vector; a skill's dense score for a query is the
largest cosine similarity of the query to the tasks it solved, and the lexical (BM25)
and dense rankings are combined by reciprocal rank fusion (`rrf`).

Tables (the rows are the state; the FTS index is rebuilt from them):
    skills(id, name, doc, program, signature, uses, task_id, step)   one per skill
    solved(skill_id, task_id, task_text, step)   the training tasks a skill verified on
    vectors(skill_id, task_id, vector)   a solved row's unit vector (float32, base64):
        only with an embedder, whose name is meta's `embedding`
    heldout(decoding, task_id, evaluations, solved_ever, solved_last)   the lifelong
        record of the fixed held-out stream (forgetting: solved before, failing now)
    meta(key, value)   the latest evaluation's lifelong figures (JSON)

Checkpoints: `save(folder, step)` writes every row to <folder>/voyager/step_N.json
(write-then-rename with fsync, as the cell's outputs); `load` restores them row for row
into a fresh in-memory database, so a resumed cell's library equals the uninterrupted
one's.
"""
from __future__ import annotations

import base64
import json
import os
import re
import sqlite3
from pathlib import Path
from typing import Optional

import numpy as np

from ablate.protocol.skills import Skill

TABLES = {
    "skills": "id INTEGER PRIMARY KEY, name TEXT UNIQUE NOT NULL, doc TEXT NOT NULL, "
              "program TEXT NOT NULL, signature TEXT UNIQUE NOT NULL, uses TEXT NOT NULL, "
              "task_id TEXT NOT NULL, step INTEGER NOT NULL",
    "solved": "skill_id INTEGER NOT NULL, task_id TEXT NOT NULL, task_text TEXT NOT NULL, "
              "step INTEGER NOT NULL, PRIMARY KEY (skill_id, task_id)",
    "heldout": "decoding TEXT NOT NULL, task_id TEXT NOT NULL, evaluations INTEGER NOT NULL, "
               "solved_ever INTEGER NOT NULL, solved_last INTEGER NOT NULL, "
               "PRIMARY KEY (decoding, task_id)",
    "meta": "key TEXT PRIMARY KEY, value TEXT NOT NULL",
    "vectors": "skill_id INTEGER NOT NULL, task_id TEXT NOT NULL, vector TEXT NOT NULL, "
               "PRIMARY KEY (skill_id, task_id)",
}
ORDER = {"skills": "id", "solved": "skill_id, task_id", "heldout": "decoding, task_id",
         "meta": "key", "vectors": "skill_id, task_id"}
RRF_K = 60           # the constant of Cormack et al. (2009), who found it robust


def fts_query(text: str) -> str:
    """Free text as an FTS5 query: each distinct word a quoted term, OR-ed (BM25 then
    ranks by how many and how rare the shared words are)."""
    words = dict.fromkeys(w.lower() for w in re.findall(r"\w+", text))
    return " OR ".join('"' + w.replace('"', '""') + '"' for w in words)


def rrf(rankings: list[list], k: int = RRF_K) -> list[tuple]:
    """Reciprocal rank fusion (Cormack, Clarke & Buettcher, 2009, SIGIR, "Reciprocal rank
    fusion outperforms Condorcet and individual rank learning methods", eq. 1):
    score(d) = sum over rankings r of 1 / (k + r(d)), ranks from 1; (item, score), best
    first, ties by item (a skill's id: the older first)."""
    scores: dict = {}
    for ranking in rankings:
        for r, d in enumerate(ranking, 1):
            scores[d] = scores.get(d, 0.0) + 1.0 / (k + r)
    return sorted(scores.items(), key=lambda x: (-x[1], x[0]))


def pack(v: np.ndarray) -> str:
    return base64.b64encode(np.asarray(v, "<f4").tobytes()).decode("ascii")


def unpack(text: str) -> np.ndarray:
    return np.frombuffer(base64.b64decode(text), "<f4")


class SkillLibrary:
    """`embedder`: None (BM25 only) or a callable text -> unit vector with a `name`
    (ablate/agents/embedding.py); `fusion_k`: the RRF constant."""

    def __init__(self, embedder=None, fusion_k: int = RRF_K):
        self.embedder, self.fusion_k = embedder, int(fusion_k)
        self._matrix = None                      # (skill ids, vectors), rebuilt on change
        self.db = sqlite3.connect(":memory:")
        for name, cols in TABLES.items():
            self.db.execute(f"CREATE TABLE {name} ({cols})")
        self.db.execute("CREATE VIRTUAL TABLE skill_fts USING fts5(name, doc, tasks, "
                        "tokenize='porter unicode61')")

    def __len__(self) -> int:
        return self.db.execute("SELECT COUNT(*) FROM skills").fetchone()[0]

    # --- skills --------------------------------------------------------------------------
    def add(self, skill: Skill, task_id: str, task_text: str, step: int) -> str:
        """Store a verified skill (or, when one with the same program is stored, credit
        it with this task); returns the stored skill's name."""
        sig = skill.signature()
        row = self.db.execute("SELECT id, name FROM skills WHERE signature = ?",
                              (sig,)).fetchone()
        if row is None:
            name = self._free_name(skill.name)
            program = json.dumps({**skill.to_json(), "name": name}, ensure_ascii=False)
            cur = self.db.execute(
                "INSERT INTO skills (name, doc, program, signature, uses, task_id, step) "
                "VALUES (?, ?, ?, ?, ?, ?, ?)", (name, skill.doc, program, sig,
                                                 json.dumps(list(skill.uses)), task_id, step))
            row = (cur.lastrowid, name)
        new = self.db.execute("INSERT OR IGNORE INTO solved VALUES (?, ?, ?, ?)",
                              (row[0], task_id, task_text, step)).rowcount
        self._index(row[0])
        if new and self.embedder is not None:
            self.set_meta("embedding", self.embedder.name)
            self.db.execute("INSERT INTO vectors VALUES (?, ?, ?)",
                            (row[0], task_id, pack(self.embedder(task_text))))
            self._matrix = None
        return row[1]

    def _free_name(self, base: str) -> str:
        name, k = base or "skill", 1
        while self.db.execute("SELECT 1 FROM skills WHERE name = ?", (name,)).fetchone():
            k += 1
            name = f"{base}_{k}"
        return name

    def _index(self, skill_id: int) -> None:
        name, doc = self.db.execute("SELECT name, doc FROM skills WHERE id = ?",
                                    (skill_id,)).fetchone()
        tasks = "\n".join(t for (t,) in self.db.execute(
            "SELECT task_text FROM solved WHERE skill_id = ? ORDER BY task_id", (skill_id,)))
        self.db.execute("DELETE FROM skill_fts WHERE rowid = ?", (skill_id,))
        self.db.execute("INSERT INTO skill_fts (rowid, name, doc, tasks) VALUES (?, ?, ?, ?)",
                        (skill_id, name, doc, tasks))

    def get(self, name: str) -> Optional[Skill]:
        row = self.db.execute("SELECT program FROM skills WHERE name = ?", (name,)).fetchone()
        return Skill.from_json(json.loads(row[0])) if row else None

    def search(self, text: str, k: int) -> list[tuple[Skill, float]]:
        """The top-k skills for `text` with their scores, lower is better: BM25 (FTS5's
        bm25(); ties by age), or with an embedder minus the RRF score of the BM25 and the
        dense ranking (then every skill with a vector is a candidate)."""
        if k <= 0:
            return []
        lexical = self._bm25(text)
        if self.embedder is None:
            ranked = lexical[:k]
        else:
            fused = rrf([[i for i, _ in lexical], self._dense(text)], self.fusion_k)
            ranked = [(i, -score) for i, score in fused[:k]]
        if not ranked:
            return []
        programs = dict(self.db.execute(
            f"SELECT id, program FROM skills WHERE id IN ({', '.join('?' * len(ranked))})",
            [i for i, _ in ranked]).fetchall())
        return [(Skill.from_json(json.loads(programs[i])), float(r)) for i, r in ranked]

    def _bm25(self, text: str) -> list[tuple[int, float]]:
        q = fts_query(text)
        if not q:
            return []
        return [(i, float(r)) for i, r in self.db.execute(
            "SELECT rowid, bm25(skill_fts) AS r FROM skill_fts WHERE skill_fts MATCH ? "
            "ORDER BY r, rowid", (q,))]

    def _dense(self, text: str) -> list[int]:
        """Skill ids by the largest cosine of `text` to a task each solved, best first
        (ties by age)."""
        if self._matrix is None:
            rows = self.db.execute("SELECT skill_id, vector FROM vectors "
                                   "ORDER BY skill_id, task_id").fetchall()
            self._matrix = (np.array([i for i, _ in rows], int),
                            np.stack([unpack(v) for _, v in rows]) if rows else None)
        ids, mat = self._matrix
        if mat is None:
            return []
        sims = mat @ self.embedder(text)
        best: dict[int, float] = {}
        for i, s in zip(ids.tolist(), sims.tolist()):
            best[i] = max(best.get(i, -2.0), s)
        return sorted(best, key=lambda i: (-best[i], i))

    def solved_task_ids(self) -> set[str]:
        return {t for (t,) in self.db.execute("SELECT task_id FROM solved")}

    # --- the held-out stream ---------------------------------------------------------
    def record_eval(self, decoding: str, solved: dict[str, bool]) -> dict[str, bool]:
        """Record one evaluation of the held-out stream (task id -> solved now); returns
        task id -> forgotten (solved at an earlier evaluation, not now)."""
        out = {}
        for task_id, ok in solved.items():
            row = self.db.execute("SELECT evaluations, solved_ever FROM heldout WHERE "
                                  "decoding = ? AND task_id = ?", (decoding, task_id)
                                  ).fetchone() or (0, 0)
            out[task_id] = bool(row[1]) and not ok
            self.db.execute("INSERT OR REPLACE INTO heldout VALUES (?, ?, ?, ?, ?)",
                            (decoding, task_id, row[0] + 1, int(bool(row[1]) or ok), int(ok)))
        return out

    def set_meta(self, key: str, value) -> None:
        self.db.execute("INSERT OR REPLACE INTO meta VALUES (?, ?)", (key, json.dumps(value)))

    def meta(self, key: str, default=None):
        row = self.db.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        return json.loads(row[0]) if row else default

    # --- rows and checkpoints ------------------------------------------------------------
    def rows(self) -> dict[str, list[list]]:
        """Every row of every table, in primary-key order (the library's whole state)."""
        return {t: [list(r) for r in self.db.execute(f"SELECT * FROM {t} ORDER BY {o}")]
                for t, o in ORDER.items()}

    def restore(self, rows: dict[str, list[list]]) -> None:
        for t in (*ORDER, "skill_fts"):
            self.db.execute(f"DELETE FROM {t}")
        for t in ORDER:
            for r in rows.get(t, []):
                self.db.execute(f"INSERT INTO {t} VALUES ({', '.join('?' * len(r))})", r)
        for (skill_id,) in self.db.execute("SELECT id FROM skills ORDER BY id").fetchall():
            self._index(skill_id)
        self._matrix = None

    @staticmethod
    def path(ckpt_dir, step: int) -> Path:
        return Path(ckpt_dir) / "voyager" / f"step_{step:08d}.json"

    def save(self, ckpt_dir, step: int) -> None:
        path = self.path(ckpt_dir, step)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
        with tmp.open("w", encoding="utf-8") as fh:
            fh.write(json.dumps(self.rows(), ensure_ascii=False))
            fh.flush()
            os.fsync(fh.fileno())
        tmp.replace(path)

    def load(self, ckpt_dir, step: int) -> None:
        path = self.path(ckpt_dir, step)
        if not path.exists():
            raise FileNotFoundError(f"{path}: the skill library of the step-{step} "
                                    "checkpoint is missing; cannot resume exactly")
        self.restore(json.loads(path.read_text(encoding="utf-8")))
        stored, now = self.meta("embedding"), getattr(self.embedder, "name", None)
        if self.db.execute("SELECT COUNT(*) FROM vectors").fetchone()[0] and stored != now:
            raise ValueError(f"{path}: vectors of embedding {stored!r}, but "
                             f"agent.voyager.embedding gives {now!r}; resume with the same")
