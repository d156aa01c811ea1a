"""The synthetic EnronHop mailbox: an Enron-like corpus and multi-hop tasks, generated
deterministically from a seed (same arguments => byte-identical files).

The world. People with addresses in a few organisations and departments exchange email
about projects with code names ("Falcon"). Each inbox owner has their own set of projects
(code names are reused across inboxes with different facts, so nothing can be memorised
across inboxes). A project has attributes (budget, site, partner, capacity) and may be
linked to a successor project ("Project Falcon has been merged into project Heron.").

Tasks. A k-hop task starts at a project named in the question, follows k-1 links (hop i's
email names the project of hop i+1) and asks an attribute of the last project; the answer
sits in the last evidence email. Every hop is found with two keywords (the project name and
the relation or attribute word, both in the question or the previous email); three
keywords that include a question word absent from the email give zero hits (strict AND),
which is the trade-off the agent has to learn. Train and test tasks come from disjoint
inboxes, and evidence emails are never shared with another inbox owner.

Designed for learnability by a tiny model (what probes of the embedded tiny model showed):
  * message ids, code names and answer values come from fixed finite pools
    (`all_special_strings()`) so the tiny tokenizer can make each one a single token;
    copying one token from context is far easier than copying a multi-token string;
  * ids are drawn at random from the pool per corpus (global sequential ids were memorised);
  * fixed key-sentence templates: the answer is the only value of its type in the email,
    right after "is"; the next hop's project is the last code name of the link email;
  * relation words of consecutive links differ, so "X merged" never also finds "Y merged
    into X"; subjects never carry the attribute or relation word, so replies do not match.
Distractors share vocabulary with the evidence: status mails about the same project,
facts and links of other projects, "we still need to agree the budget for X" mails (older
than the fact, or newer at `late_distractor_rate`), forwards that quote evidence, thread
replies, and generic company mail cc'd across inboxes.

`generate` streams emails to disk inbox by inbox, so 517,401 emails take about a minute.
"""
from __future__ import annotations

import datetime as _dt
import json
import random
from dataclasses import dataclass, field
from pathlib import Path

from ablate.envs.email.data import write_jsonl

GENERATOR_VERSION = 2

# ----------------------------------------------------------------------------- pools
ID_POOL_SIZE = 4096
ID_PREFIX = "E"


def id_pool() -> list[str]:
    """Message ids a corpus draws from (without replacement, in random order)."""
    return [f"{ID_PREFIX}{i:04d}" for i in range(ID_POOL_SIZE)]


CODENAMES = """Falcon Heron Osprey Raptor Kestrel Condor Merlin Harrier Pelican Egret Ibis
Plover Avocet Curlew Dunlin Godwit Lapwing Gannet Puffin Petrel Albatross Cormorant Bittern
Crane Stork Swift Swallow Martin Starling Thrush Warbler Wren Robin Finch Linnet Siskin
Bunting Sparrow Lark Pipit Wagtail Shrike Oriole Magpie Jackdaw Rook Raven Jay Nuthatch
Treecreeper Woodpecker Hoopoe Kingfisher Roller Cuckoo Nightjar Owl Buzzard Kite
Goshawk Hobby Peregrine Gyrfalcon Eagle Vulture Ptarmigan Grouse Quail Partridge Pheasant
Bustard Rail Coot Moorhen Sandpiper Turnstone Snipe Woodcock Phalarope Skua Tern Guillemot
Razorbill Auk Diver Grebe Fulmar Shearwater Flamingo Spoonbill Jaguar Ocelot Lynx Puma
Cheetah Leopard Panther Cougar Wolverine Badger Otter Marten Stoat Weasel Mink Ferret
Beaver Marmot Bison Moose Caribou Elk Ibex Chamois Gazelle Impala Kudu Eland Oryx Okapi
Tapir Zebra Cobalt Nickel Quartz Garnet Onyx Opal Jasper Topaz Beryl Basalt Granite Marble
Slate Flint Obsidian Pumice Cinder Ember Blaze Comet Nova Pulsar Quasar Nebula Zenith
Apex Summit Ridge Canyon Mesa Delta Fjord Glacier Tundra Prairie Savanna Steppe Sierra
Mistral Sirocco Monsoon Typhoon Cyclone Tempest Squall Gale Breeze Zephyr Chinook Foehn
Boreas Aurora Solstice Equinox""".split()

CITIES = """Houston Portland Calgary Omaha Denver Dallas Austin Chicago Boston Seattle Tulsa
Phoenix Atlanta Toronto London Oslo Sydney Madrid Lisbon Dublin Vienna Prague Warsaw Lagos
Cairo Mumbai Lima Bogota Quito Caracas Havana Nassau Anchorage Boise Reno Fresno Tacoma
Spokane Eugene Salem Wichita Topeka Lincoln Memphis Nashville Louisville Richmond Raleigh
Charlotte Tampa Orlando Miami Mobile Jackson Shreveport Amarillo Lubbock Odessa Midland
Laredo Beaumont Galveston Corpus Pueblo Billings Fargo Duluth Madison Toledo Dayton
Akron Erie Albany Hartford Trenton Dover Baltimore Norfolk Savannah""".split()

COMPANIES = """Dynegy Calpine Reliant Mirant Williams Duke Aquila Sempra Westar Avista Entergy
Conectiv Cinergy Allegheny Tractebel Transalta Powerex Koch Vitol Glencore Petrobras
Pemex Statoil Repsol Enel Iberdrola Endesa Centrica Innogy Edison Constellation Exelon
Pepco Ameren Xcel Nicor Questar Kinder Northwind Southstar Eastgate Westfield Bluewater
Redrock Greenfield Silverline Ironbridge Stonegate Clearwater Highpoint Lakeside Riverbend
Oakridge Pinecrest Maplewood Cedarline Birchwood Elmstead""".split()

AMOUNTS = [f"${x / 10:.1f}M" for x in range(5, 100)]            # $0.5M .. $9.9M
CAPACITIES = [f"{x}MW" for x in range(50, 960, 10)]               # 50MW .. 950MW

FIRST_NAMES = """Jeff Sara Vince Louise Kenneth Sally Mark Susan Steven Kay Richard Tana
Chris Kim John Mary Greg Lisa David Karen James Carol Robert Diane Michael Janet Paul Linda
William Nancy Thomas Laura Daniel Ruth Brian Helen Kevin Amy Jason Anne Eric Julie Scott
Joan Gary Emily Frank Rachel Peter Megan Dan Holly Tim Jill Andy Wendy Phil Tracy""".split()

LAST_NAMES = """Dasovich Shackleton Kaminski Kitchen Lay Beck Taylor Mara Kean Mann Shapiro
Jones Watson Arnold Germany Haedicke Lavorato Delainey Whalley Skilling Fastow Causey
Buy Derrick Sanders Steffes Tycholiz Grigsby Hyatt Lokay Farmer Scholtes Symes Ward Hain
Nemec Quigley Presto Rogers Bass Baughman Cash Dorland Forney Gay Griffith Hodge Keavey
Lenhart Lucci Maggi McCarty Motley Neal Parks Pereira Quenet Ring Rodrique Salisbury
Semperger Smith Storey Stclair Tholt Weldon Zipper Zufferli Whitt""".split()

ORGS = [("enron.com", ["Gas Trading", "Power Trading", "Legal", "Government Affairs",
                       "Research", "Risk Management", "Origination", "Pipeline Operations"]),
        ("ees.enron.com", ["Retail Services", "Energy Management"]),
        ("ect.enron.com", ["Structuring", "Credit"])]

ATTRIBUTES = {  # word in question and email -> (pool, key sentence templates)
    "budget": (AMOUNTS, ["The approved budget for project {p} is {v}.",
                         "Final numbers are in: the budget for project {p} is {v}."]),
    "site": (CITIES, ["The site for project {p} is {v}.",
                      "We have settled it: the site for project {p} is {v}."]),
    "partner": (COMPANIES, ["The partner on project {p} is {v}.",
                            "Contracts are signed, so the partner on project {p} is {v}."]),
    "capacity": (CAPACITIES, ["The capacity of project {p} is {v}.",
                              "After the review the capacity of project {p} is {v}."]),
}
RELATIONS = {  # keyword -> participle phrase (the keyword is its first word)
    "merged": "merged into", "handed": "handed over to",
    "folded": "folded into", "transferred": "transferred to",
}
NEXT_HOP_WORDS = ("another project", "a third project", "a fourth project")

SUBJECTS_FACT = ["{p} update", "Quick note on {p}", "{p} - decision", "{p} numbers"]
SUBJECTS_LINK = ["{p} status change", "Change to {p}", "{p} reorganisation"]
SUBJECTS_STATUS = ["{p} weekly status", "{p} meeting notes", "{p} schedule", "Re: {p}"]
# Generic sentences: never an attribute, relation word or code name (they would create
# unplanned matches).
FILLER = ["Please review the attached draft before Friday.", "Let me know if you have questions.",
          "We will go over this at the Tuesday staff meeting.", "Thanks for the quick turnaround.",
          "The legal team wants one more look at the terms.", "Call me on my cell if anything changes.",
          "I have copied the desk heads for visibility.", "The schedule slipped by a week.",
          "Risk has signed off on the position limits.", "Gas prices moved again this morning.",
          "The deal desk is short-staffed this week.", "Expect the summary by end of day."]
STATUS_LINES = ["The {p} team met on {d} and agreed the next steps.",
                "Work on project {p} is on track for the quarter.",
                "Open items for project {p} are listed below.",
                "Project {p} came up again in the {d} call."]
PENDING = {"budget": "We still need to agree the budget for project {p}.",
           "site": "The site for project {p} is still under discussion.",
           "partner": "No decision yet on the partner for project {p}.",
           "capacity": "The capacity of project {p} is being re-estimated."}
GENERIC_SUBJECTS = ["Staff meeting", "Holiday schedule", "Gas daily", "Parking update",
                    "Quarterly review", "Systems outage tonight", "Lunch on Friday",
                    "Expense reports", "Credit watch list", "Desk move"]
ACKS = ["Thanks, noted.", "Got it, thanks.", "Will do.", "Sounds good to me.",
        "Thanks for the update.", "Let's discuss tomorrow."]
DAYS = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday"]

START = _dt.datetime(2000, 1, 3, 8, 0, 0)
SPAN_DAYS = 700


def all_special_strings() -> list[str]:
    """Every string the tiny tokenizer should keep as one token: message ids, code names,
    answer values. Fixed (independent of seed) and in a stable order."""
    out, seen = [], set()
    for s in id_pool() + CODENAMES + CITIES + COMPANIES + AMOUNTS + CAPACITIES:
        if s not in seen:
            seen.add(s)
            out.append(s)
    return out


def answer_pools() -> dict[str, list[str]]:
    return {k: list(v[0]) for k, v in ATTRIBUTES.items()}


# ----------------------------------------------------------------------------- world
@dataclass
class _Person:
    first: str
    last: str
    address: str
    dept: str


@dataclass
class _Inbox:
    owner: _Person
    split: str                        # "train" | "test"
    n_tasks: int
    tasks: list = field(default_factory=list)


def _fmt(t: _dt.datetime) -> str:
    return t.strftime("%Y-%m-%d %H:%M:%S")


def _people(rng: random.Random, n: int) -> list[_Person]:
    names = [(f, l) for f in FIRST_NAMES for l in LAST_NAMES]
    rng.shuffle(names)
    if n > len(names):
        raise ValueError(f"at most {len(names)} people can be generated, asked for {n}")
    out = []
    for f, l in names[:n]:
        domain, depts = ORGS[rng.randrange(len(ORGS)) if rng.random() < 0.3 else 0]
        out.append(_Person(f, l, f"{f.lower()}.{l.lower()}@{domain}", rng.choice(depts)))
    return out


class _Ids:
    """Random message ids: pool tokens in a seeded order; past the pool, a suffix."""

    def __init__(self, rng: random.Random, total: int):
        pool = id_pool()
        self.order = list(range(total))
        rng.shuffle(self.order)
        self.pool = pool
        self.i = 0

    def next(self) -> str:
        k = self.order[self.i]
        self.i += 1
        base = self.pool[k % len(self.pool)]
        return base if k < len(self.pool) else f"{base}.{k // len(self.pool)}"


def _split_counts(total: int, parts: int) -> list[int]:
    base, extra = divmod(total, parts) if parts else (0, 0)
    return [base + (1 if i < extra else 0) for i in range(parts)]


def generate(out_dir, *, seed: int = 0, num_inboxes: int = 24, emails_per_inbox: int = 120,
             train_tasks: int = 400, test_tasks: int = 200, max_hops: int = 2,
             late_distractor_rate: float = 0.1, num_emails: int | None = None,
             progress: bool = False) -> dict[str, Path]:
    """Write emails.jsonl, train_tasks.jsonl, test_tasks.jsonl into out_dir.

    num_emails (optional) sets the corpus size exactly (e.g. 517,401), spread over the
    inboxes; otherwise num_inboxes x emails_per_inbox. Returns the three paths."""
    if not 1 <= max_hops <= 4:
        raise ValueError(f"max_hops={max_hops} must be in 1..4")
    if num_inboxes < (2 if train_tasks and test_tasks else 1):
        raise ValueError("num_inboxes must be >= 2 when both train and test tasks are asked")
    total = num_emails if num_emails is not None else num_inboxes * emails_per_inbox
    per_inbox = _split_counts(total, num_inboxes)
    rng = random.Random(f"synthetic-{seed}")
    # Inbox owners + colleagues/external correspondents (never inbox owners).
    people = _people(rng, num_inboxes + max(40, num_inboxes))
    owners, others = people[:num_inboxes], people[num_inboxes:]
    n_test_inb = 0
    if test_tasks:
        n_test_inb = max(1, round(num_inboxes * test_tasks / (train_tasks + test_tasks)))
        if train_tasks:
            n_test_inb = min(n_test_inb, num_inboxes - 1)
    n_train_inb = num_inboxes - n_test_inb
    inboxes = ([_Inbox(o, "train", n) for o, n in
                zip(owners[:n_train_inb], _split_counts(train_tasks, n_train_inb))] +
               [_Inbox(o, "test", n) for o, n in
                zip(owners[n_train_inb:], _split_counts(test_tasks, n_test_inb))])
    ids = _Ids(rng, total)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = {"emails": out / "emails.jsonl", "train_tasks": out / "train_tasks.jsonl",
             "test_tasks": out / "test_tasks.jsonl"}
    tmp = paths["emails"].with_name("emails.jsonl.tmp")
    bar = None
    if progress:
        from tqdm import tqdm
        bar = tqdm(total=total, desc="synthetic emails", unit="email")
    with tmp.open("w", encoding="utf-8") as fh:
        for idx, inbox in enumerate(inboxes):
            irng = random.Random(f"synthetic-{seed}-inbox-{idx}")
            emails = _InboxWorld(irng, inbox, others, owners, ids, max_hops,
                                 per_inbox[idx], late_distractor_rate).emails()
            for e in emails:
                fh.write(json.dumps(e, ensure_ascii=False) + "\n")
            if bar:
                bar.update(len(emails))
    tmp.replace(paths["emails"])
    if bar:
        bar.close()
    for split in ("train", "test"):
        tasks = [t for inb in inboxes if inb.split == split for t in inb.tasks]
        write_jsonl(paths[f"{split}_tasks"], tasks)
    return paths


class _InboxWorld:
    """Projects, links, facts and the emails of one inbox owner."""

    def __init__(self, rng, inbox: _Inbox, others, owners, ids: _Ids, max_hops: int,
                 n_emails: int, late_rate: float):
        self.rng, self.inbox, self.others, self.owners = rng, inbox, others, owners
        self.ids, self.max_hops, self.n_emails, self.late_rate = ids, max_hops, n_emails, late_rate
        self.owner = inbox.owner
        self.out: list[dict] = []

    # -- helpers -------------------------------------------------------------------
    def _date(self, lo: int = 0, hi: int = SPAN_DAYS) -> _dt.datetime:
        r = self.rng
        return START + _dt.timedelta(days=r.randrange(lo, hi), hours=r.randrange(0, 10),
                                     minutes=r.randrange(60), seconds=r.randrange(60))

    def _mail(self, subject, body, date, sender=None, to=None, cc=(), quiet=False) -> dict:
        """An email between the owner and a colleague (the owner receives unless sender
        is the owner). quiet: never copied to another inbox owner (evidence)."""
        r = self.rng
        colleague = r.choice(self.others)
        sender = sender or colleague
        to = to or ([self.owner] if sender is not self.owner else [colleague])
        cc = list(cc)
        if not quiet and r.random() < 0.15:
            cc.append(r.choice(self.others))
        sign = f"\n\n{sender.first}\n{sender.dept}"
        greet = f"{to[0].first},\n\n"
        rec = {"message_id": self.ids.next(), "subject": subject,
               "from_address": sender.address, "to_addresses": [p.address for p in to],
               "cc_addresses": [p.address for p in cc], "bcc_addresses": [],
               "date": _fmt(date), "body": greet + body + sign}
        self.out.append(rec)
        return rec

    def _filler(self, k: int = 1) -> str:
        return " ".join(self.rng.sample(FILLER, k))

    # -- world ---------------------------------------------------------------------
    def _plan(self):
        r, h_max = self.rng, self.max_hops
        n_tasks = self.inbox.n_tasks
        n_proj = min(len(CODENAMES), max(2 * n_tasks + 8, 20))
        projects = r.sample(CODENAMES, n_proj)
        # Disjoint paths of max_hops projects; consecutive relations differ.
        paths, links = [], {}
        for i in range(0, n_proj - h_max + 1, h_max):
            path = projects[i:i + h_max]
            prev = None
            for a, b in zip(path, path[1:]):
                rel = r.choice([x for x in RELATIONS if x != prev])
                links[a] = (rel, b)
                prev = rel
            paths.append(path)
        values = {p: {a: r.choice(pool) for a, (pool, _) in ATTRIBUTES.items()}
                  for p in projects}
        tasks, seen = [], set()
        attempts = 0
        while len(tasks) < n_tasks and attempts < 50 * (n_tasks + 1):
            attempts += 1
            hops = 1 + (len(tasks) % h_max)
            path = r.choice(paths)
            if len(path) < hops:
                continue
            s = r.randrange(0, len(path) - hops + 1)
            chain = path[s:s + hops]
            attr = r.choice(list(ATTRIBUTES))
            if (chain[0], hops, attr) in seen:
                continue
            seen.add((chain[0], hops, attr))
            tasks.append((chain, attr))
        if len(tasks) < n_tasks:
            raise ValueError(f"inbox {self.owner.address}: could only plan {len(tasks)} of "
                             f"{n_tasks} tasks; use more inboxes or fewer tasks")
        return projects, links, values, tasks

    def emails(self) -> list[dict]:
        r = self.rng
        projects, links, values, tasks = self._plan()
        used_links = {p for chain, _ in tasks for p in chain[:-1]}
        used_facts = {(chain[-1], attr) for chain, attr in tasks}
        n_evidence = len(used_links) + len(used_facts)
        if n_evidence > self.n_emails:
            raise ValueError(f"inbox {self.owner.address} needs {n_evidence} evidence emails "
                             f"but has room for {self.n_emails}; raise emails_per_inbox")
        evidence = {}  # ("link", p) | ("fact", p, attr) -> (message_id, date)
        for p in sorted(used_links, key=projects.index):
            rel, q = links[p]
            d = self._date(0, SPAN_DAYS - 120)
            body = (f"Project {p} has been {RELATIONS[rel]} project {q}. {self._filler()}")
            rec = self._mail(r.choice(SUBJECTS_LINK).format(p=p), body, d, quiet=True)
            evidence[("link", p)] = (rec["message_id"], d, rec)
        for p, attr in sorted(used_facts, key=lambda x: (projects.index(x[0]), x[1])):
            d = self._date(30, SPAN_DAYS - 120)
            key = r.choice(ATTRIBUTES[attr][1]).format(p=p, v=values[p][attr])
            body = f"{self._filler()} {key}" if r.random() < 0.5 else f"{key} {self._filler()}"
            rec = self._mail(r.choice(SUBJECTS_FACT).format(p=p), body, d, quiet=True)
            evidence[("fact", p, attr)] = (rec["message_id"], d, rec)
            # Same-vocabulary distractor without the value: usually older than the fact.
            late = r.random() < self.late_rate
            dd = d + _dt.timedelta(days=r.randrange(1, 20)) if late else \
                d - _dt.timedelta(days=r.randrange(1, 30))
            if len(self.out) < self.n_emails:
                self._mail(r.choice(SUBJECTS_STATUS).format(p=p),
                           f"{PENDING[attr].format(p=p)} {self._filler()}", dd)
        # Tasks (dates after their evidence).
        for chain, attr in tasks:
            keys = [("link", p) for p in chain[:-1]] + [("fact", chain[-1], attr)]
            mids = [evidence[k][0] for k in keys]
            last = max(evidence[k][1] for k in keys)
            qd = (last + _dt.timedelta(days=r.randrange(2, 60))).replace(
                hour=0, minute=0, second=0)
            self.inbox.tasks.append(self._task(chain, attr, links, mids, _fmt(qd),
                                               values[chain[-1]][attr]))
        ev_recs = [v[2] for v in evidence.values()]
        # Fill the rest of the inbox: status mails, other facts/links, forwards, replies,
        # generic company mail.
        while len(self.out) < self.n_emails:
            x = r.random()
            p = r.choice(projects)
            d = self._date()
            if x < 0.30:
                line = r.choice(STATUS_LINES).format(p=p, d=r.choice(DAYS))
                self._mail(r.choice(SUBJECTS_STATUS).format(p=p), f"{line} {self._filler(2)}", d)
            elif x < 0.42:   # a fact or link no task asks about (same vocabulary)
                attr = r.choice(list(ATTRIBUTES))
                if (p, attr) in used_facts or p in used_links:
                    continue
                if p in links and r.random() < 0.5:
                    rel, q = links[p]
                    used_links.add(p)
                    self._mail(r.choice(SUBJECTS_LINK).format(p=p),
                               f"Project {p} has been {RELATIONS[rel]} project {q}. "
                               f"{self._filler()}", d, quiet=True)
                else:
                    used_facts.add((p, attr))
                    key = r.choice(ATTRIBUTES[attr][1]).format(p=p, v=values[p][attr])
                    self._mail(r.choice(SUBJECTS_FACT).format(p=p),
                               f"{key} {self._filler()}", d, quiet=True)
            elif x < 0.50 and ev_recs:   # the owner forwards evidence to a colleague
                src = r.choice(ev_recs)
                sd = _dt.datetime.strptime(src["date"], "%Y-%m-%d %H:%M:%S")
                fd = sd + _dt.timedelta(days=r.randrange(1, 40))
                body = (f"FYI, see below.\n\n----- Forwarded message -----\n"
                        f"Subject: {src['subject']}\n\n{src['body']}")
                self._mail(f"Fw: {src['subject']}", body, fd, sender=self.owner, quiet=True)
            elif x < 0.70 and self.out:   # a reply in an existing thread
                src = r.choice(self.out)
                sd = _dt.datetime.strptime(src["date"], "%Y-%m-%d %H:%M:%S")
                subj = src["subject"] if src["subject"].startswith("Re: ") else \
                    f"Re: {src['subject']}"
                self._mail(subj, r.choice(ACKS), sd + _dt.timedelta(hours=r.randrange(1, 72)),
                           sender=self.owner if r.random() < 0.5 else None)
            else:   # generic company mail, sometimes shared with another inbox owner
                cc = [r.choice(self.owners)] if r.random() < 0.3 else []
                cc = [c for c in cc if c is not self.owner]
                self._mail(r.choice(GENERIC_SUBJECTS), self._filler(2), d, cc=cc)
        # Chronological order inside the inbox (readable files; the DB orders by date).
        self.out.sort(key=lambda e: (e["date"], e["message_id"]))
        return self.out

    def _task(self, chain, attr, links, mids, query_date, answer) -> dict:
        hops = len(chain)
        if hops == 1:
            q = f"What is the {attr} of project {chain[0]}?"
        else:
            parts = [f"Project {chain[0]} was {RELATIONS[links[chain[0]][0]]} another project"]
            for i, p in enumerate(chain[1:-1], start=1):
                parts.append(f", which was then {RELATIONS[links[p][0]]} "
                             f"{NEXT_HOP_WORDS[i]}")
            q = "".join(parts) + f". What is the {attr} of the last project?"
        n = len(self.inbox.tasks)
        tid = f"{self.inbox.split}-{self.owner.first.lower()}.{self.owner.last.lower()}-{n:03d}"
        return {"id": tid, "question": q, "answer": answer, "message_ids": mids,
                "inbox_address": self.owner.address, "query_date": query_date,
                "hops": hops}


def main(argv=None) -> None:
    import argparse
    ap = argparse.ArgumentParser(description="Generate a synthetic EnronHop mailbox.")
    ap.add_argument("out_dir")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--num-inboxes", type=int, default=24)
    ap.add_argument("--emails-per-inbox", type=int, default=120)
    ap.add_argument("--num-emails", type=int, default=None)
    ap.add_argument("--train-tasks", type=int, default=400)
    ap.add_argument("--test-tasks", type=int, default=200)
    ap.add_argument("--max-hops", type=int, default=2)
    a = ap.parse_args(argv)
    paths = generate(a.out_dir, seed=a.seed, num_inboxes=a.num_inboxes,
                     emails_per_inbox=a.emails_per_inbox, train_tasks=a.train_tasks,
                     test_tasks=a.test_tasks, max_hops=a.max_hops, num_emails=a.num_emails,
                     progress=True)
    print(json.dumps({k: str(v) for k, v in paths.items()}))


if __name__ == "__main__":
    main()
