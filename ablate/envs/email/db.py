"""EmailDB: the EnronHop mailbox as a SQLite FTS5 database (docs/data.md: the input
format; the search semantics follow ART-E, the OpenPipe "ART·E" email agent).

Search semantics (ART-E / EnronHop): each keyword is one quoted FTS5 phrase, phrases are
ANDed, results are limited to emails the inbox sent or received and dated strictly
before `sent_before`, at most `max_results` (<= 10) hits, newest first.

Why the schema looks the way it does: filtering the inbox *after* the full-text match
makes common keywords scan every match in the corpus (p95 77 ms measured on 200k
emails). Here the inbox is narrowed *inside* the index:
  * every email carries an `inboxes` FTS column holding one opaque token per member
    address ("u17"), so the inbox is just one more ANDed term of the MATCH, evaluated by
    FTS5's doclist merge (it skips through posting lists instead of testing rows);
  * row ids are assigned newest first (id 1 = the latest email; ties: later in the file
    first), so "dated before X" is a lower rowid bound that FTS5 applies inside its scan,
    and "newest first" is FTS5's natural ascending rowid order, which stops after
    `LIMIT` matches. (Ascending, not `ORDER BY rowid DESC`: FTS5 walks doclists backwards
    page by page, which measured ~1.5-2x slower on common words.)
Keyword phrases are column-filtered to {subject body}, so a keyword can never hit an
inbox token.

Recipients are stored per email *row id* with their kind and position, so to/cc/bcc
round-trip exactly (the reference implementation joined on message_id and came back
empty).

A build is cached by the content hash of the input file (meta table); it is written to a
temporary file and renamed into place, so a killed build never leaves a half database.
"""
from __future__ import annotations

import datetime as _dt
import hashlib
import json
import logging
import os
import re
import socket
import sqlite3
import tempfile
import time
import unicodedata
import urllib.parse
from collections.abc import Iterable, Sequence
from pathlib import Path

from tqdm import tqdm

from ablate.envs.email.data import DataFileError, read_emails
from ablate.core.locks import process_alive

log = logging.getLogger(__name__)

SCHEMA_VERSION = "4"                 # bump when the on-disk layout changes: forces rebuild
MAX_RESULTS_LIMIT = 10               # ART-E returns at most 10 hits
PROGRESS_MIN_EMAILS = 50_000         # show a progress bar only on builds at least this big
_BATCH = 5_000
_NOTHING = 1 << 62                   # a rowid bound no email reaches
_SNIPPET_TOKENS = 24
_DATE_RE = re.compile(r"^\d{4}-\d{2}-\d{2}(?:[ T]\d{2}:\d{2}(?::\d{2}(?:\.\d+)?)?)?$")

_SCHEMA = """
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE emails (
    id INTEGER PRIMARY KEY,           -- 1 = newest: descending in (date, file order)
    message_id TEXT NOT NULL UNIQUE,
    subject TEXT NOT NULL,
    from_address TEXT NOT NULL,
    date TEXT NOT NULL,
    body TEXT NOT NULL,
    inboxes TEXT NOT NULL              -- "u3 u17": tokens of member inboxes (FTS column)
);
CREATE TABLE recipients (
    email_id INTEGER NOT NULL REFERENCES emails(id),   -- row id, never message_id
    kind TEXT NOT NULL CHECK (kind IN ('to', 'cc', 'bcc')),
    pos INTEGER NOT NULL,
    address TEXT NOT NULL,
    PRIMARY KEY (email_id, kind, pos)
) WITHOUT ROWID;
CREATE TABLE inboxes (id INTEGER PRIMARY KEY, address TEXT NOT NULL UNIQUE);
CREATE TABLE membership (
    inbox_id INTEGER NOT NULL, email_id INTEGER NOT NULL, PRIMARY KEY (inbox_id, email_id)
) WITHOUT ROWID;
"""
_INDEXES = """
CREATE INDEX emails_date ON emails(date, id DESC);  -- serves the date -> rowid bound
CREATE INDEX emails_from ON emails(from_address);
CREATE INDEX recipients_address ON recipients(address, email_id);
"""
_FTS_CREATE = """
CREATE VIRTUAL TABLE emails_fts USING fts5(
    subject, body, inboxes, content='emails', content_rowid='id',
    tokenize='unicode61 remove_diacritics 2');
-- a 128 MiB in-memory term hash (default 1 MiB): far fewer segments to merge, ~2x faster
INSERT INTO emails_fts(emails_fts, rank) VALUES ('hashsize', 134217728);
INSERT INTO emails_fts(emails_fts) VALUES ('rebuild');
"""
# one segment per term: queries read one doclist instead of merging several
_FTS_OPTIMIZE = "INSERT INTO emails_fts(emails_fts) VALUES ('optimize');"


class EmailDBError(RuntimeError):
    """The database file is missing, unreadable, or not an EmailDB of this version."""


def normalize_address(address: str) -> str:
    """Inbox membership compares addresses case-insensitively, ignoring outer spaces
    (email local parts are case-insensitive in practice; Enron exports mix case)."""
    return address.strip().lower()


def normalize_date(value, name: str = "sent_before") -> str:
    """'YYYY-MM-DD[ HH:MM[:SS]]' (a 'T' separator, date or datetime accepted) as the
    string that compares correctly against stored dates ("YYYY-MM-DD HH:MM:SS")."""
    if isinstance(value, _dt.datetime):
        return value.strftime("%Y-%m-%d %H:%M:%S")
    if isinstance(value, _dt.date):
        return value.strftime("%Y-%m-%d")
    if not isinstance(value, str) or not _DATE_RE.match(value.strip()):
        raise ValueError(f"{name}={value!r} is not a date 'YYYY-MM-DD[ HH:MM:SS]'")
    return value.strip().replace("T", " ")


def _clean_text(text: str) -> str:
    """Make a string safe to bind and to put inside an FTS5 phrase: control characters
    (NUL ends an FTS5 string early) and lone surrogates (not encodable as UTF-8) become
    spaces. unicode61 treats both as separators anyway, so no match is changed."""
    if text.isprintable() and text.isascii():
        return text
    return "".join(" " if unicodedata.category(ch) in ("Cc", "Cs") else ch for ch in text)


def _bindable(text: str) -> str:
    """Lone surrogates (possible from JSON "\\ud800" escapes) cannot be encoded as UTF-8
    for SQLite; replace them, keep everything else (newlines, tabs) as is."""
    try:
        text.encode("utf-8")
        return text
    except UnicodeEncodeError:
        return text.encode("utf-8", "replace").decode("utf-8")


def fts_query(inbox_token: str, keywords: Sequence[str]) -> str | None:
    """The MATCH expression: inbox token AND every keyword as a quoted phrase over
    {subject body}. None when a keyword has no text at all (it can match nothing, and
    under strict AND neither can the whole query). FTS5 syntax inside a quoted phrase is
    inert: only '"' is special there, and it is doubled (FTS5 string rules)."""
    phrases = []
    for kw in keywords:
        kw = _clean_text(kw).strip()
        if not kw:
            return None
        phrases.append('"' + kw.replace('"', '""') + '"')
    return f'{{inboxes}} : "{inbox_token}" AND {{subject body}} : ({" AND ".join(phrases)})'


def file_digest(path: Path) -> tuple[str, int]:
    """(blake2b hex digest, number of lines) of a file, read in 8 MiB chunks."""
    h = hashlib.blake2b(digest_size=20)
    lines = 0
    with path.open("rb") as fh:
        while chunk := fh.read(8 << 20):
            h.update(chunk)
            lines += chunk.count(b"\n")
    return h.hexdigest(), lines


class EmailDB:
    """Read-only handle on a built database. One object per thread; open one per process."""

    def __init__(self, conn: sqlite3.Connection, path: Path):
        self._conn = conn
        self.path = path
        self.meta = dict(conn.execute("SELECT key, value FROM meta"))
        self._inbox_ids: dict[str, int | None] = {}
        self._cutoffs: dict[str, int | None] = {}

    # ------------------------------------------------------------------ construction
    @classmethod
    def build(cls, emails_jsonl: str | os.PathLike, db_path: str | os.PathLike,
              *, progress: bool | None = None) -> "EmailDB":
        """Build (or reuse) the database for `emails_jsonl` at `db_path`.

        Reused without rebuilding when the stored content hash and schema version match;
        otherwise built into a temporary file in the same directory and renamed over
        `db_path` (atomic), so concurrent builders and killed builds are harmless."""
        src, dst = Path(emails_jsonl), Path(db_path)
        if not src.is_file():
            raise DataFileError(f"emails file not found: {src}")
        digest, n_lines = file_digest(src)
        if dst.exists():
            try:
                db = cls.open(dst)
                if db.meta.get("source_hash") == digest:
                    return db
                db.close()
                log.info("EmailDB %s is stale (input changed): rebuilding", dst)
            except EmailDBError as exc:
                log.warning("EmailDB %s unusable (%s): rebuilding", dst, exc)
        dst.parent.mkdir(parents=True, exist_ok=True)
        remove_stale_builds(dst)
        fd, tmp_name = tempfile.mkstemp(prefix=f".{dst.name}.{_OWNER}.", suffix=".building",
                                        dir=dst.parent)
        os.close(fd)
        tmp = Path(tmp_name)
        os.chmod(tmp, 0o644)   # mkstemp makes 0600; the database is shared read-only data
        stage = tmp.with_suffix(".stage")
        try:
            show = progress if progress is not None else n_lines >= PROGRESS_MIN_EMAILS
            _build_into(src, tmp, stage, digest, n_lines, show)
            os.replace(tmp, dst)
        finally:
            for leftover in (tmp, stage, Path(str(stage) + "-journal")):
                leftover.unlink(missing_ok=True)
        return cls.open(dst)

    def locate(self, message_id: str) -> tuple[str, set[str]] | None:
        """(date, member inbox addresses) of an email by message_id, in any inbox; None
        if the mailbox has no such id. For data checks, never exposed to the agent."""
        row = self._conn.execute("SELECT id, date FROM emails WHERE message_id = ?",
                                 (_bindable(message_id),)).fetchone()
        if row is None:
            return None
        members = {a for (a,) in self._conn.execute(
            "SELECT i.address FROM membership m JOIN inboxes i ON i.id = m.inbox_id "
            "WHERE m.email_id = ?", (row[0],))}
        return row[1], members

    @classmethod
    def open(cls, db_path: str | os.PathLike) -> "EmailDB":
        path = Path(db_path)
        if not path.is_file():
            raise EmailDBError(f"EmailDB file not found: {path}")
        try:
            uri = "file:" + urllib.parse.quote(str(path.resolve())) + "?mode=ro"
            conn = sqlite3.connect(uri, uri=True)
            conn.execute("PRAGMA query_only = 1")
            conn.execute("PRAGMA cache_size = -65536")      # 64 MiB page cache
            conn.execute("PRAGMA mmap_size = 1073741824")   # map up to 1 GiB: fewer syscalls
            version = conn.execute(
                "SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
        except sqlite3.DatabaseError as exc:
            raise EmailDBError(f"{path} is not an EmailDB ({exc})") from None
        if version is None or version[0] != SCHEMA_VERSION:
            conn.close()
            raise EmailDBError(f"{path} has schema version {version and version[0]!r}, "
                               f"expected {SCHEMA_VERSION!r}")
        return cls(conn, path)

    def close(self) -> None:
        self._conn.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __len__(self) -> int:
        return int(self.meta["num_emails"])

    # ------------------------------------------------------------------ queries
    def inboxes(self) -> list[str]:
        return [a for (a,) in self._conn.execute("SELECT address FROM inboxes ORDER BY id")]

    def has_inbox(self, inbox: str) -> bool:
        """True when `inbox` sent or received at least one email."""
        return isinstance(inbox, str) and self._inbox_id(inbox) is not None

    def _inbox_id(self, inbox: str) -> int | None:
        key = normalize_address(_clean_text(inbox))
        if key not in self._inbox_ids:
            row = self._conn.execute("SELECT id FROM inboxes WHERE address = ?",
                                     (key,)).fetchone()
            self._inbox_ids[key] = row[0] if row else None
        return self._inbox_ids[key]

    def _cutoff(self, sent_before) -> int | None:
        """Smallest row id of an email dated strictly before `sent_before`: since ids
        descend with (date, file order), rows at or above it are exactly those emails.
        None = no bound; _NOTHING when no email is that old."""
        if sent_before is None:
            return None
        key = normalize_date(sent_before)
        if key not in self._cutoffs:
            # the newest email before key: one backwards seek in the (date, id DESC)
            # index (min(id) would aggregate over every earlier row)
            row = self._conn.execute(
                "SELECT id FROM emails WHERE date < ? ORDER BY date DESC, id ASC LIMIT 1",
                (key,)).fetchone()
            self._cutoffs[key] = row[0] if row else _NOTHING
        return self._cutoffs[key]

    def search(self, inbox: str, keywords: Iterable[str], sent_before=None,
               max_results: int = MAX_RESULTS_LIMIT, *, order: str = "date") -> list[dict]:
        """Emails of `inbox` dated strictly before `sent_before` whose subject or body
        contains every keyword as a phrase (case- and diacritic-insensitive, unicode61
        tokens). Each hit: {message_id, subject, date, snippet}.

        order="date" (default, as the ART-E reference): newest first, ties by reverse
        file order. order="bm25": best FTS5 bm25 rank first (subject weighted 2x body);
        it must rank every match, so it is slower on common keywords.
        An empty keyword list, or any keyword without text, gives [] (strict AND)."""
        if isinstance(keywords, (str, bytes)) or not isinstance(keywords, Iterable):
            raise TypeError(f"keywords must be a list of strings, got {type(keywords).__name__}")
        keywords = list(keywords)
        bad = [k for k in keywords if not isinstance(k, str)]
        if bad:
            raise TypeError(f"keywords must be strings, got {bad[0]!r}")
        if not isinstance(max_results, int) or not 1 <= max_results <= MAX_RESULTS_LIMIT:
            raise ValueError(f"max_results={max_results!r} must be in 1..{MAX_RESULTS_LIMIT}")
        if order not in ("date", "bm25"):
            raise ValueError(f"order={order!r} must be 'date' or 'bm25'")
        if not isinstance(inbox, str):
            raise TypeError(f"inbox must be a string, got {type(inbox).__name__}")
        cutoff = self._cutoff(sent_before)
        inbox_id = self._inbox_id(inbox)
        if not keywords or inbox_id is None:
            return []
        match = fts_query(f"u{inbox_id}", keywords)
        if match is None:
            return []
        if cutoff == _NOTHING:
            return []
        ordering = ("emails_fts.rowid" if order == "date"
                    else "bm25(emails_fts, 2.0, 1.0, 0.0), emails_fts.rowid")
        sql = (f"SELECT emails_fts.rowid, snippet(emails_fts, 1, '', '', ' … ', "
               f"{_SNIPPET_TOKENS}) FROM emails_fts WHERE emails_fts MATCH ?"
               f"{' AND emails_fts.rowid >= ?' if cutoff is not None else ''} "
               f"ORDER BY {ordering} LIMIT ?")
        params = (match, cutoff, max_results) if cutoff is not None else (match, max_results)
        rows = self._conn.execute(sql, params).fetchall()
        if not rows:
            return []
        marks = ",".join("?" * len(rows))
        info = {i: (m, s, d) for i, m, s, d in self._conn.execute(
            f"SELECT id, message_id, subject, date FROM emails WHERE id IN ({marks})",
            [r[0] for r in rows])}
        return [{"message_id": info[i][0], "subject": info[i][1], "date": info[i][2],
                 "snippet": " ".join(snip.split())} for i, snip in rows]

    def read(self, inbox: str, message_id: str, sent_before=None) -> dict | None:
        """The full email (all Email fields) if `inbox` sent or received it (and, when
        `sent_before` is given, it is dated strictly before it); otherwise None. A
        missing id and an id outside the inbox are indistinguishable on purpose."""
        if not isinstance(message_id, str) or not isinstance(inbox, str):
            return None
        cutoff = self._cutoff(sent_before)
        inbox_id = self._inbox_id(inbox)
        if inbox_id is None:
            return None
        row = self._conn.execute(
            "SELECT e.id, e.message_id, e.subject, e.from_address, e.date, e.body "
            "FROM emails e JOIN membership m ON m.email_id = e.id AND m.inbox_id = ? "
            "WHERE e.message_id = ?", (inbox_id, _bindable(message_id))).fetchone()
        if row is None or (cutoff is not None and row[0] < cutoff):
            return None
        lists = {"to": [], "cc": [], "bcc": []}
        for kind, address in self._conn.execute(
                "SELECT kind, address FROM recipients WHERE email_id = ? ORDER BY kind, pos",
                (row[0],)):
            lists[kind].append(address)
        return {"message_id": row[1], "subject": row[2], "from_address": row[3],
                "to_addresses": lists["to"], "cc_addresses": lists["cc"],
                "bcc_addresses": lists["bcc"], "date": row[4], "body": row[5]}


# ---------------------------------------------------------------------- building
_OWNER = f"{socket.gethostname().replace('.', '-')}-{os.getpid()}"
STALE_BUILD_SECONDS = 24 * 3600      # another host's leftovers: removed after a day


def remove_stale_builds(dst: Path) -> list[Path]:
    """Delete the temporary files (".<name>.<host>-<pid>.*.building", its ".stage" and
    journals) that a killed build of `dst` left: those of a dead process on this host,
    or older than a day. A live builder's files are kept. Returns what was removed."""
    removed = []
    for path in dst.parent.glob(f".{dst.name}.*"):
        if not (path.name.endswith((".building", ".stage")) or "-journal" in path.name):
            continue
        owner = path.name[len(dst.name) + 2:].split(".", 1)[0]
        host, _, pid = owner.rpartition("-")
        try:
            age = time.time() - path.stat().st_mtime
        except FileNotFoundError:
            continue
        mine = host == socket.gethostname().replace(".", "-") and pid.isdigit()
        if (mine and not process_alive(int(pid))) or age > STALE_BUILD_SECONDS:
            path.unlink(missing_ok=True)
            removed.append(path)
    if removed:
        log.info("EmailDB: removed %d file(s) left by an interrupted build of %s",
                 len(removed), dst)
    return removed


def _build_into(src: Path, tmp: Path, stage: Path, digest: str, n_lines: int,
                show_progress: bool) -> None:
    t0 = time.perf_counter()
    conn = sqlite3.connect(tmp, isolation_level=None)
    try:
        for pragma in ("journal_mode = OFF", "synchronous = OFF", "cache_size = -131072",
                       "temp_store = FILE", "page_size = 8192"):
            conn.execute(f"PRAGMA {pragma}")
        conn.execute("ATTACH DATABASE ? AS stage", (str(stage),))
        conn.execute("PRAGMA stage.journal_mode = OFF")
        conn.execute("PRAGMA stage.synchronous = OFF")
        conn.executescript(_SCHEMA)
        conn.executescript("""
            CREATE TABLE stage.raw (seq INTEGER PRIMARY KEY, message_id TEXT, subject TEXT,
                from_address TEXT, date TEXT, body TEXT, inboxes TEXT, to_j TEXT, cc_j TEXT,
                bcc_j TEXT, members_j TEXT);
            CREATE TABLE stage.idmap (seq INTEGER PRIMARY KEY, id INTEGER NOT NULL);
        """)
        conn.execute("BEGIN")
        inbox_ids, dated, duplicates = _stage_emails(conn, src, n_lines, show_progress)
        conn.executemany("INSERT INTO inboxes (id, address) VALUES (?, ?)",
                         ((i, a) for a, i in inbox_ids.items()))
        # Row ids newest first: the search's date bound and its newest-first order both
        # become rowid operations inside FTS5.
        dated.sort()
        # indexed by file position: skipped duplicates leave holes (id 0, not inserted)
        ids = [0] * (max((seq for _, seq in dated), default=-1) + 1)
        for rank, (_, seq) in enumerate(reversed(dated), 1):   # newest first
            ids[seq] = rank
        conn.executemany("INSERT INTO stage.idmap VALUES (?, ?)",
                         ((seq, i) for seq, i in enumerate(ids) if i))
        del dated, ids
        conn.execute("COMMIT")
        log.info("EmailDB build: loaded in %.1f s", time.perf_counter() - t0)
        # raw is scanned in file order (CROSS JOIN fixes the loop order) and the rows go
        # through SQLite's external sorter: sequential I/O instead of random lookups
        conn.executescript("""
            BEGIN;
            INSERT INTO emails (id, message_id, subject, from_address, date, body, inboxes)
                SELECT m.id, r.message_id, r.subject, r.from_address, r.date, r.body,
                       r.inboxes
                FROM stage.raw r CROSS JOIN stage.idmap m ON m.seq = r.seq ORDER BY m.id;
            INSERT INTO recipients (email_id, kind, pos, address)
                SELECT m.id, k.kind, j.key, j.value
                FROM stage.raw r CROSS JOIN stage.idmap m ON m.seq = r.seq
                CROSS JOIN (SELECT 'to' AS kind UNION ALL SELECT 'cc' UNION ALL SELECT 'bcc') k
                CROSS JOIN json_each(CASE k.kind WHEN 'to' THEN r.to_j
                                     WHEN 'cc' THEN r.cc_j ELSE r.bcc_j END) j
                ORDER BY m.id, k.kind, j.key;
            INSERT INTO membership (inbox_id, email_id)
                SELECT j.value, m.id
                FROM stage.raw r CROSS JOIN stage.idmap m ON m.seq = r.seq
                CROSS JOIN json_each(r.members_j) j
                ORDER BY j.value, m.id;
            COMMIT;
        """)
        conn.execute("DETACH DATABASE stage")
        stage.unlink(missing_ok=True)
        log.info("EmailDB build: ordered by date at %.1f s", time.perf_counter() - t0)
        if show_progress:
            tqdm.write("EmailDB: indexing (date, inbox, full text)…")
        conn.executescript(_INDEXES)
        log.info("EmailDB build: b-tree indexes at %.1f s", time.perf_counter() - t0)
        conn.executescript(_FTS_CREATE)
        log.info("EmailDB build: full-text index at %.1f s", time.perf_counter() - t0)
        conn.executescript(_FTS_OPTIMIZE)
        log.info("EmailDB build: full-text index optimized at %.1f s",
                 time.perf_counter() - t0)
        num_emails = conn.execute("SELECT count(*) FROM emails").fetchone()[0]
        meta = {"schema_version": SCHEMA_VERSION, "source_hash": digest,
                "source_path": str(src.resolve()), "num_emails": num_emails,
                "num_inboxes": len(inbox_ids), "duplicates_skipped": duplicates,
                "built_at": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
                "build_seconds": round(time.perf_counter() - t0, 2),
                "sqlite_version": sqlite3.sqlite_version}
        conn.executemany("INSERT INTO meta (key, value) VALUES (?, ?)",
                         ((k, str(v)) for k, v in meta.items()))
        conn.execute("ANALYZE")
    finally:
        conn.close()
    if duplicates:
        log.warning("EmailDB: %d duplicate message_id(s) in %s skipped (first kept)",
                    duplicates, src)


def _stage_emails(conn: sqlite3.Connection, src: Path, n_lines: int, show_progress: bool
                  ) -> tuple[dict[str, int], list[tuple[str, int]], int]:
    """Stream the JSONL into stage.raw (file order). Returns ({inbox address: id},
    [(date, seq)] of the emails kept, number of duplicate message ids skipped)."""
    inbox_ids: dict[str, int] = {}
    seen: set[str] = set()
    dated: list[tuple[str, int]] = []
    duplicates = 0
    raw: list[tuple] = []
    dump = json.dumps
    bar = tqdm(total=n_lines, desc="EmailDB: loading emails", unit="email",
               disable=not show_progress, mininterval=1.0)
    try:
        for seq, email in enumerate(read_emails(src)):
            bar.update()
            if email.message_id in seen:
                duplicates += 1
                continue
            seen.add(email.message_id)
            date = normalize_date(email.date, "date")     # read_emails checked the form
            sender = _bindable(email.from_address)
            to, cc, bcc = ([_bindable(a) for a in lst] for lst in
                           (email.to_addresses, email.cc_addresses, email.bcc_addresses))
            members = set()
            for address in (sender, *to, *cc, *bcc):
                key = normalize_address(address)
                if key:
                    members.add(inbox_ids.setdefault(key, len(inbox_ids) + 1))
            members = sorted(members)
            dated.append((date, seq))
            raw.append((seq, _bindable(email.message_id), _bindable(email.subject), sender,
                        date, _bindable(email.body), " ".join(f"u{i}" for i in members),
                        dump(to), dump(cc), dump(bcc), dump(members)))
            if len(raw) >= _BATCH:
                conn.executemany("INSERT INTO stage.raw VALUES (?,?,?,?,?,?,?,?,?,?,?)", raw)
                raw.clear()
        conn.executemany("INSERT INTO stage.raw VALUES (?,?,?,?,?,?,?,?,?,?,?)", raw)
    finally:
        bar.close()
    return inbox_ids, dated, duplicates
