"""EmailDB: strict-AND phrase search, inbox/date isolation, hostile keywords, exact
recipients, content-hash cache and atomic builds (issue 2, "Must hold")."""
from __future__ import annotations

import itertools
import json
import os
import random
import re
import sqlite3

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ablate.envs.email import Email, EmailDB, write_jsonl
from ablate.envs.email.data import DataFileError
from ablate.envs.email.db import EmailDBError

ALICE, BOB, CAROL, DAVE, EVE = (f"{n}@enron.com" for n in ("alice", "bob", "carol", "dave", "eve"))
# filler vocabulary; the hand-written emails' key words (raptor, budget, houston,
# pipeline, ...) stay out of it so their expected hits are exact
WORDS = ("meeting gas deal contract trading credit review quarter report legal draft price "
         "power market energy schedule").split()

HAND = [
    Email("<h1>", "Raptor budget", ALICE, [BOB], [CAROL], [], "2001-03-01 09:00:00",
          "The Raptor budget is $4.2M for Q3. Meet in Houston."),
    Email("<h2>", "Re: Raptor budget", BOB, [ALICE, "Alice@Enron.com"], [], [DAVE],
          "2001-03-02 10:30:00", "Budget raptor approved; the new pipeline starts Monday."),
    Email("<h3>", "Lunch", EVE, ["frank@aep.com"], [], [], "2001-03-03 12:00:00",
          "Raptor lunch in Houston, the pipeline crew is invited."),
    Email("<h4>", "Same second", ALICE, [CAROL], [], [], "2001-03-02 10:30:00",
          "Raptor twin email with the same timestamp."),
    Email("<h5>", "Cafe", CAROL, [ALICE], [EVE, EVE], [BOB], "2001-03-04 08:00:00",
          "Café crème near the Enron building; raptor again."),
]


def filler(seed: int, n: int) -> list[Email]:
    """Seeded volume: random words over a small vocabulary and five inboxes, dates out
    of file order."""
    rng = random.Random(seed)
    people = [ALICE, BOB, CAROL, DAVE, EVE]
    out = []
    for i in range(n):
        sender, *rest = rng.sample(people, 4)
        out.append(Email(
            f"<f{i}@x>", " ".join(rng.choices(WORDS, k=rng.randint(1, 4))), sender,
            rest[:rng.randint(1, 2)], rest[2:3] if rng.random() < 0.3 else [],
            rest[1:2] if rng.random() < 0.2 else [],
            f"2000-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d} "
            f"{rng.randint(0, 23):02d}:{rng.randint(0, 59):02d}:00",
            " ".join(rng.choices(WORDS, k=rng.randint(3, 25)))))
    return out


EMAILS = HAND + filler(7, 400)


@pytest.fixture(scope="module")
def db(tmp_path_factory):
    d = tmp_path_factory.mktemp("db")
    write_jsonl(d / "emails.jsonl", EMAILS)
    database = EmailDB.build(d / "emails.jsonl", d / "emails.sqlite")
    yield database
    database.close()


# ---------------------------------------------------------------------- oracle
def toks(text: str) -> list[str]:
    # unicode61 with remove_diacritics: letters/digits, case-folded, accents dropped
    text = text.lower().replace("é", "e").replace("è", "e")
    return re.findall(r"[^\W_]+", text)


def contains_phrase(text: str, phrase: list[str]) -> bool:
    t, n = toks(text), len(phrase)
    return n > 0 and any(t[i:i + n] == phrase for i in range(len(t) - n + 1))


def member(e: Email, inbox: str) -> bool:
    inbox = inbox.strip().lower()
    return any(a.strip().lower() == inbox for a in
               (e.from_address, *e.to_addresses, *e.cc_addresses, *e.bcc_addresses))


def oracle(inbox, keywords, sent_before=None, k=10) -> list[str]:
    """The search semantics written out longhand over the source records."""
    if not keywords:
        return []
    phrases = [toks(kw) for kw in keywords]
    hits = [(e.date, i, e.message_id) for i, e in enumerate(EMAILS)
            if member(e, inbox) and (sent_before is None or e.date < sent_before)
            and all(contains_phrase(e.subject, p) or contains_phrase(e.body, p)
                    for p in phrases)]
    return [m for _, _, m in sorted(hits, reverse=True)[:k]]


def ids(results) -> list[str]:
    return [r["message_id"] for r in results]


# ---------------------------------------------------------------------- semantics
def test_hits_have_the_contract_fields(db):
    hits = db.search(ALICE, ["raptor", "budget"])
    assert ids(hits)[:1] == ["<h2>"] and set(ids(hits)) >= {"<h1>", "<h2>"}
    assert set(hits[0]) == {"message_id", "subject", "date", "snippet"}
    assert hits[0]["subject"] == "Re: Raptor budget" and hits[0]["date"] == "2001-03-02 10:30:00"
    assert "pipeline" in hits[0]["snippet"]


def test_strict_and_one_absent_keyword_gives_zero_hits(db):
    assert "<h1>" in ids(db.search(ALICE, ["raptor", "houston"]))
    assert db.search(ALICE, ["raptor", "houston", "zeppelin"]) == []
    assert db.search(ALICE, ["houston", "zeppelin", "raptor"]) == []


def test_keyword_order_does_not_matter(db):
    base = ids(db.search(ALICE, ["raptor", "budget", "houston"]))
    assert base == ["<h1>"]
    for perm in itertools.permutations(["raptor", "budget", "houston"]):
        assert ids(db.search(ALICE, list(perm))) == base


def test_multi_word_keyword_is_a_phrase(db):
    assert ids(db.search(BOB, ["raptor budget"])) == ["<h2>", "<h1>"]   # subjects of both
    assert ids(db.search(BOB, ["budget raptor approved"])) == ["<h2>"]
    assert db.search(BOB, ["budget approved"]) == []        # both words, not adjacent
    assert ids(db.search(BOB, ["budget", "approved"])) == ["<h2>"]


def test_case_and_diacritics_fold(db):
    assert ids(db.search(CAROL, ["CAFE CREME"])) == ["<h5>"]
    assert ids(db.search(CAROL, ["café"])) == ["<h5>"]


def test_newest_first_and_max_results(db):
    hits = db.search(ALICE, ["raptor"], max_results=3)
    assert len(hits) == 3
    dates = [h["date"] for h in hits]
    assert dates == sorted(dates, reverse=True)
    assert ids(hits) == oracle(ALICE, ["raptor"], k=3)
    big = db.search(ALICE, ["review"])
    assert len(big) == 10 and ids(big) == oracle(ALICE, ["review"])


def test_bm25_order_returns_the_same_set_when_all_fit(db):
    a = db.search(ALICE, ["raptor", "houston"], order="bm25")
    assert sorted(ids(a)) == sorted(ids(db.search(ALICE, ["raptor", "houston"])))


def test_sent_before_is_strict_and_accepts_date_only(db):
    assert db.search(ALICE, ["review"], sent_before="1999-01-01") == []   # nothing older
    assert db.read(ALICE, "<h1>", sent_before="1999-01-01") is None
    assert "<h1>" not in ids(db.search(ALICE, ["raptor"], sent_before="2001-03-01 09:00:00"))
    assert ids(db.search(ALICE, ["raptor"], sent_before="2001-03-01 09:00:01")) == ["<h1>"]
    assert ids(db.search(ALICE, ["raptor"], sent_before="2001-03-02")) == ["<h1>"]
    assert ids(db.search(ALICE, ["raptor"], sent_before="2001-03-02T10:30:01")) == \
        ["<h4>", "<h2>", "<h1>"]   # equal dates: later in the file comes first


def test_empty_and_textless_keywords_give_nothing(db):
    assert db.search(ALICE, []) == []
    assert db.search(ALICE, [""]) == []
    assert db.search(ALICE, ["   "]) == []
    assert db.search(ALICE, ["raptor", ""]) == []
    assert db.search(ALICE, ["raptor", "$$$"]) == []        # no token: matches nothing
    assert db.search("nobody@nowhere.org", ["raptor"]) == []


def test_bad_arguments_are_clear_errors(db):
    with pytest.raises(TypeError, match="list of strings"):
        db.search(ALICE, "raptor")
    with pytest.raises(TypeError, match="strings"):
        db.search(ALICE, ["raptor", 3])
    with pytest.raises(ValueError, match="max_results=11"):
        db.search(ALICE, ["raptor"], max_results=11)
    with pytest.raises(ValueError, match="sent_before='yesterday'"):
        db.search(ALICE, ["raptor"], sent_before="yesterday")
    with pytest.raises(ValueError, match="order"):
        db.search(ALICE, ["raptor"], order="random")


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(inbox=st.sampled_from([ALICE, BOB, CAROL, DAVE, EVE]),
       kws=st.lists(st.sampled_from(WORDS + ["raptor budget", "gas deal", "raptor", "houston"]),
                    min_size=1, max_size=3),
       month=st.integers(1, 12))
def test_search_equals_the_longhand_oracle(db, inbox, kws, month):
    before = f"2000-{month:02d}-15 00:00:00"
    assert ids(db.search(inbox, kws, sent_before=before)) == oracle(inbox, kws, before)
    assert ids(db.search(inbox, kws)) == oracle(inbox, kws)


# ---------------------------------------------------------------------- hostile input
FTS_SYNTAX = ['"', '""', "'", "AND", "OR", "NOT", "NEAR", "NEAR(raptor houston, 5)", "*",
              "raptor*", "^raptor", "subject:raptor", "body : raptor", "{subject}: raptor",
              "inboxes:u1", "u1", "(", ")", "(raptor OR houston)", "raptor OR budget",
              "raptor NOT houston", "- raptor", "+", ":", "\x00", "\x00raptor", "rap\x00tor",
              "\x1b[31m", "\n", "\t", "'; DROP TABLE emails; --", "1=1", "%", "_", "\\",
              "\ud800", "raptor\" OR \"houston", "a" * 5000, "raptor " * 300, "ｒａｐｔｏｒ"]
ASCII_HOSTILE = st.text(alphabet=st.sampled_from(
    list('"\'()*^:{}+-.,;!?@#$%&/\\| \t\n\x00\x01\x1f') + list("abrptohusnAND ORNTE")),
    max_size=40)


@pytest.mark.parametrize("kw", FTS_SYNTAX)
def test_fts_syntax_is_inert_and_never_widens(db, kw):
    for inbox in (ALICE, EVE):
        alone = db.search(inbox, [kw])
        paired = db.search(inbox, ["raptor", kw])
        assert set(ids(paired)) <= set(ids(db.search(inbox, ["raptor"])))
        for hits in (alone, paired):
            for h in hits:
                e = next(e for e in EMAILS if e.message_id == h["message_id"])
                assert member(e, inbox)
    # operators quoted as phrases never act as operators: OR does not widen, NOT does not
    # exclude, a column filter does not reach the hidden inbox column
    assert db.search(ALICE, ["raptor OR budget"]) == []
    assert db.search(ALICE, ["inboxes:u1"]) == [] and db.search(ALICE, ["u1"]) == []


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(kws=st.lists(ASCII_HOSTILE, min_size=1, max_size=3),
       inbox=st.sampled_from([ALICE, BOB, EVE]))
def test_hostile_ascii_keywords_match_the_oracle(db, kws, inbox):
    got = ids(db.search(inbox, kws))
    if any(not k.strip() for k in kws):
        assert got == []
    else:
        assert got == oracle(inbox, kws)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(kws=st.lists(st.text(max_size=60), max_size=4), inbox=st.text(max_size=20))
def test_arbitrary_unicode_never_crashes_or_leaks(db, kws, inbox):
    for h in db.search(inbox, kws, sent_before="2001-03-03"):
        e = next(e for e in EMAILS if e.message_id == h["message_id"])
        assert member(e, inbox) and e.date < "2001-03-03"


# ---------------------------------------------------------------------- isolation / read
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(inbox=st.sampled_from([ALICE, BOB, CAROL, DAVE, EVE, "frank@aep.com"]),
       kw=st.sampled_from(WORDS), day=st.integers(1, 360))
def test_isolation_search_and_read(db, inbox, kw, day):
    before = f"2000-{1 + day // 30 % 12:02d}-{1 + day % 28:02d} 12:00:00"
    for h in db.search(inbox, [kw], sent_before=before):
        e = next(e for e in EMAILS if e.message_id == h["message_id"])
        assert member(e, inbox) and e.date < before
    for e in EMAILS[::17]:
        got = db.read(inbox, e.message_id, sent_before=before)
        assert (got is not None) == (member(e, inbox) and e.date < before)


def test_read_outside_inbox_is_indistinguishable_from_missing(db):
    assert db.read(ALICE, "<h3>") is None                    # exists, not Alice's
    assert db.read(ALICE, "<nope>") is None
    assert db.read(ALICE, "") is None and db.read(ALICE, None) is None
    assert db.read(EVE, "<h3>")["subject"] == "Lunch"
    assert db.read(ALICE, "<h2>", sent_before="2001-03-02 10:30:00") is None
    assert db.read("ALICE@enron.com ", "<h2>") is not None   # address case/space folded


def test_recipients_round_trip_exactly(db):
    for e in EMAILS:
        assert db.read(e.from_address, e.message_id) == e.to_json(), e.message_id
    # bcc-only recipient sees the email with all lists intact (duplicates and case kept)
    assert db.read(DAVE, "<h2>")["to_addresses"] == [ALICE, "Alice@Enron.com"]
    assert db.read(BOB, "<h5>")["cc_addresses"] == [EVE, EVE]
    assert db.read(BOB, "<h5>")["bcc_addresses"] == [BOB]


# ---------------------------------------------------------------------- build and cache
def test_second_build_is_cached_and_changed_input_rebuilds(tmp_path):
    src, out = tmp_path / "e.jsonl", tmp_path / "e.sqlite"
    write_jsonl(src, HAND)
    first = EmailDB.build(src, out)
    built_at, inode, mtime = first.meta["built_at"], out.stat().st_ino, out.stat().st_mtime_ns
    first.close()
    again = EmailDB.build(src, out)
    assert again.meta["built_at"] == built_at and again.meta["source_hash"] == first.meta[
        "source_hash"]
    assert (out.stat().st_ino, out.stat().st_mtime_ns) == (inode, mtime)   # not rewritten
    assert again.search(EVE, ["lunch"]) and not again.search(EVE, ["zeppelin"])
    again.close()
    write_jsonl(src, HAND + [Email("<z>", "Zeppelin", EVE, [BOB], [], [], "2001-04-01 00:00:00",
                                   "zeppelin ride")])
    rebuilt = EmailDB.build(src, out)
    assert rebuilt.meta["source_hash"] != first.meta["source_hash"]
    assert ids(rebuilt.search(EVE, ["zeppelin"])) == ["<z>"]
    assert len(rebuilt) == len(HAND) + 1
    rebuilt.close()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["e.jsonl", "e.sqlite"]  # no temps


def test_failed_build_leaves_no_half_database_and_keeps_the_old_one(tmp_path):
    src, out = tmp_path / "e.jsonl", tmp_path / "e.sqlite"
    write_jsonl(src, HAND)
    with src.open("a") as fh:
        fh.write('{"message_id": "<bad>"}\n')       # fails after most rows are staged
    with pytest.raises(DataFileError, match="lacks field"):
        EmailDB.build(src, out)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["e.jsonl"]
    write_jsonl(src, HAND)
    EmailDB.build(src, out).close()
    with src.open("a") as fh:
        fh.write(json.dumps({**HAND[0].to_json(), "message_id": "<d>", "date": "soon"}) + "\n")
    with pytest.raises(DataFileError, match=r"e.jsonl:6: field 'date' must be a date .* got 'soon'"):
        EmailDB.build(src, out)
    with EmailDB.open(out) as old:                   # the previous good build survives
        assert len(old) == len(HAND)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["e.jsonl", "e.sqlite"]


def test_duplicates_first_kept_and_dates_out_of_order(tmp_path):
    src = tmp_path / "e.jsonl"
    dup = Email("<h1>", "Imposter", EVE, [BOB], [], [], "1999-01-01 00:00:00", "imposter")
    write_jsonl(src, list(reversed(HAND)) + [dup])
    with EmailDB.build(src, tmp_path / "e.sqlite") as d:
        assert d.meta["duplicates_skipped"] == "1" and len(d) == len(HAND)
        assert d.read(ALICE, "<h1>")["subject"] == "Raptor budget"
        assert d.search(EVE, ["imposter"]) == []
        rows = d._conn.execute("SELECT date FROM emails ORDER BY id").fetchall()
        assert rows == sorted(rows, reverse=True)    # row ids: newest first


def test_open_rejects_missing_foreign_and_stale_files(tmp_path):
    with pytest.raises(EmailDBError, match="not found"):
        EmailDB.open(tmp_path / "none.sqlite")
    (tmp_path / "junk.sqlite").write_bytes(b"not a database at all" * 100)
    with pytest.raises(EmailDBError, match="not an EmailDB"):
        EmailDB.open(tmp_path / "junk.sqlite")
    other = tmp_path / "other.sqlite"
    sqlite3.connect(other).executescript(
        "CREATE TABLE meta (key, value); INSERT INTO meta VALUES ('schema_version', '0');")
    with pytest.raises(EmailDBError, match="schema version '0'"):
        EmailDB.open(other)
    src = tmp_path / "e.jsonl"
    write_jsonl(src, HAND)
    with EmailDB.build(src, other) as d:             # an unusable file at the path is rebuilt
        assert len(d) == len(HAND)
    with pytest.raises(DataFileError, match="not found"):
        EmailDB.build(tmp_path / "missing.jsonl", tmp_path / "x.sqlite")


def test_database_file_is_readable_by_others(db):
    assert os.stat(db.path).st_mode & 0o044 == 0o044
