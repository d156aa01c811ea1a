"""The synthetic EnronHop generator: determinism, structure, answerability, isolation."""
import json
import time

import pytest

from ablate.envs.email import synthetic
from ablate.envs.email.data import read_emails, read_tasks
from ablate.envs.email.db import EmailDB
from ablate.envs.email.scripted import parse_question

KW = dict(seed=7, num_inboxes=6, emails_per_inbox=80, train_tasks=60, test_tasks=30,
          max_hops=3)


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    d = tmp_path_factory.mktemp("syn")
    paths = synthetic.generate(d, **KW)
    db = EmailDB.build(paths["emails"], d / "db.sqlite")
    emails = {e.message_id: e for e in read_emails(paths["emails"])}
    return {"paths": paths, "db": db, "emails": emails,
            "train": read_tasks(paths["train_tasks"]), "test": read_tasks(paths["test_tasks"])}


def test_same_seed_gives_byte_identical_files(tmp_path, world):
    paths = synthetic.generate(tmp_path / "again", **KW)
    for k in ("emails", "train_tasks", "test_tasks"):
        assert paths[k].read_bytes() == world["paths"][k].read_bytes()
    other = synthetic.generate(tmp_path / "other", **{**KW, "seed": 8})
    assert other["emails"].read_bytes() != world["paths"]["emails"].read_bytes()


def test_sizes_fields_and_hops(world):
    assert len(world["emails"]) == 6 * 80
    assert len(world["train"]) == 60 and len(world["test"]) == 30
    tasks = world["train"] + world["test"]
    assert len({t.id for t in tasks}) == 90
    # hop counts cycle 1..max_hops in every inbox: balanced
    counts = {h: sum(t.hops == h for t in tasks) for h in (1, 2, 3)}
    assert counts == {1: 30, 2: 30, 3: 30}
    for t in tasks:
        assert len(t.message_ids) == t.hops
    rec = json.loads(world["paths"]["emails"].read_text().splitlines()[0])
    assert list(rec) == ["message_id", "subject", "from_address", "to_addresses",
                         "cc_addresses", "bcc_addresses", "date", "body"]


def test_train_and_test_inboxes_disjoint_and_evidence_private(world):
    train_in = {t.inbox_address for t in world["train"]}
    test_in = {t.inbox_address for t in world["test"]}
    assert train_in and test_in and not train_in & test_in
    owners = train_in | test_in
    for t in world["train"] + world["test"]:
        for mid in t.message_ids:
            e = world["emails"][mid]
            members = {e.from_address, *e.to_addresses, *e.cc_addresses, *e.bcc_addresses}
            # the evidence reaches no other inbox owner (no leakage across the split)
            assert members & owners == {t.inbox_address}


def test_message_ids_unique_random_and_single_pool_tokens(world):
    ids = list(world["emails"])
    assert len(set(ids)) == len(ids)
    pool = set(synthetic.id_pool())
    assert set(ids) <= pool
    # random per corpus, not sequential in date order
    by_date = sorted(world["emails"].values(), key=lambda e: e.date)
    nums = [int(e.message_id[1:]) for e in by_date]
    assert sum(a < b for a, b in zip(nums, nums[1:])) < 0.7 * len(nums)
    specials = synthetic.all_special_strings()
    assert len(specials) == len(set(specials))
    for pool_ in (synthetic.CODENAMES, synthetic.CITIES, synthetic.COMPANIES):
        assert all(s.isalpha() for s in pool_)


def test_evidence_chain_answer_and_isolation(world):
    db = world["db"]
    for t in world["train"] + world["test"]:
        assert t.answer not in t.question
        ent, words = parse_question(t.question)
        assert len(words) == t.hops
        for k, mid in enumerate(t.message_ids):
            e = world["emails"][mid]
            assert e.date < t.query_date
            assert db.read(t.inbox_address, mid, sent_before=t.query_date) is not None
            # two keywords find the hop's email (strict AND, before the query date)
            hits = [h["message_id"] for h in
                    db.search(t.inbox_address, [ent, words[k]], sent_before=t.query_date)]
            assert mid in hits
            # a question word the email lacks gives zero hits (the keyword trade-off)
            assert db.search(t.inbox_address, [ent, words[k], "zzzmissing"],
                             sent_before=t.query_date) == []
            if k < t.hops - 1:
                nxt = e.body.split("project ")[-1].split(".")[0]
                assert nxt != ent and nxt in synthetic.CODENAMES
                ent = nxt
            else:
                assert t.answer in e.body
                pool = synthetic.answer_pools()[words[k]]
                assert t.answer in pool
                # the answer is the only value of its type in the evidence email
                assert sum(v in e.body.split() or v + "." in e.body.split()
                           for v in pool) == 1


def test_question_alone_does_not_answer(world):
    values = set(synthetic.AMOUNTS + synthetic.CAPACITIES + synthetic.CITIES +
                 synthetic.COMPANIES)
    for t in world["train"] + world["test"]:
        assert not any(v in t.question.split() for v in values)


def test_distractors_share_vocabulary(world):
    db = world["db"]
    t = next(t for t in world["test"] if t.hops == 1)
    ent, words = parse_question(t.question)
    # the project name alone matches more than the evidence email
    assert len(db.search(t.inbox_address, [ent], sent_before=t.query_date)) > 1
    # the attribute word alone matches other projects' emails
    assert len(db.search(t.inbox_address, [words[0]], sent_before=t.query_date)) > 1


def test_bad_arguments(tmp_path):
    with pytest.raises(ValueError, match="max_hops"):
        synthetic.generate(tmp_path, max_hops=5)
    with pytest.raises(ValueError, match="emails_per_inbox"):
        synthetic.generate(tmp_path, num_inboxes=2, emails_per_inbox=5, train_tasks=40,
                           test_tasks=40)


def test_exact_corpus_size_and_ids_past_the_pool(tmp_path):
    paths = synthetic.generate(tmp_path, seed=1, num_inboxes=4, num_emails=5001,
                               train_tasks=12, test_tasks=4, max_hops=4)
    ids = [json.loads(l)["message_id"] for l in paths["emails"].read_text().splitlines()]
    assert len(ids) == 5001 and len(set(ids)) == 5001
    assert sum("." in i for i in ids) == 5001 - synthetic.ID_POOL_SIZE
    assert {t.hops for t in read_tasks(paths["train_tasks"])} == {1, 2, 3, 4}


@pytest.mark.heavy
def test_benchmark_scale_generates_in_minutes(tmp_path):
    t0 = time.time()
    paths = synthetic.generate(tmp_path, seed=0, num_inboxes=150, num_emails=517_401,
                               train_tasks=2000, test_tasks=1000, max_hops=4)
    assert time.time() - t0 < 180
    with paths["emails"].open() as fh:
        assert sum(1 for _ in fh) == 517_401
