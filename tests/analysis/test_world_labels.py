"""A user world's own words reach the analysis (issue 48, item 7): the cells'
environment.json `breakdown_label` names what the rows' `hops` counts in the report,
tables and figures, and its `behaviour_labels` columns that the rows hold as numbers are
estimated like the built-in behaviour fields and shown under the world's labels. Runs
without environment.json keep the built-in words (analysis/labels.py)."""
import json

import pytest
import yaml

from analysis import cli, figures
from analysis.collect import Cell, Run

HOTEL = {"name": "hotel", "answer_tool": "book", "tools": ["search_rooms", "book"],
         "default_reward": "outcome", "breakdown_label": "rooms",
         "behaviour_labels": {"bookings": "rooms booked", "last_room": "the last room seen",
                              "reads": "room pages read"}}
SHIFT = {"naive": 1, "shaped": 3}       # bookings = SHIFT + question % 2 + sample + seed


def _row(reward: str, seed: int, step: int, q: int, k: int) -> dict:
    return {"step": step, "task_id": f"q{q}", "sample": k, "hops": 1 + q // 2,
            "correct": (q + seed + k) % 3 == 0, "answered": True, "turns": 3,
            "end_reason": "answer", "reward": 1.0, "reads": 2,
            "bookings": SHIFT[reward] + q % 2 + k + seed - (step == 0),
            "last_room": f"room {q}"}


def _sweep(root, describe: bool = True):
    """2 arms x 3 seeds, 4 questions (2 of 1 room, 2 of 2), 2 samples, steps 0 and 4."""
    for reward in SHIFT:
        for seed in range(3):
            d = root / f"reward={reward},seed={seed}"
            d.mkdir(parents=True)
            (d / "config.yaml").write_text(yaml.safe_dump(
                {"seed": seed, "env": {"name": "hotel"}, "reward": {"name": reward},
                 "trainer": {"max_steps": 4}}))
            (d / "eval.jsonl").write_text("".join(
                json.dumps(_row(reward, seed, step, q, k)) + "\n"
                for step in (0, 4) for q in range(4) for k in range(2)))
            (d / "COMPLETE").write_text("")
            if describe:
                (d / "environment.json").write_text(json.dumps(HOTEL))
    return root


def _analyse(tmp_path, describe: bool = True):
    out = tmp_path / "report"
    assert cli.main([str(_sweep(tmp_path / "sweep", describe)), "--out", str(out),
                     "--baseline", "reward=shaped", "--B", "200", "--no-figures"]) == 0
    return out, json.loads((out / "summary.json").read_text())


def test_a_worlds_breakdown_label_and_own_behaviour_column_reach_the_report(tmp_path):
    out, summary = _analyse(tmp_path)
    # the world's own column only: `reads` is BEHAVIOUR's, `last_room` is not a number
    assert summary["world"] == {"breakdown_label": "rooms",
                                "behaviour_labels": {"bookings": "rooms booked"}}
    # balanced cells: the mean over seeds of per-question means is the mean of the rows,
    # SHIFT + mean(q % 2) + mean(sample) + mean(seed) = SHIFT + 0.5 + 0.5 + 1
    by = {c["factors"]["reward.name"]: c for c in summary["cells"]}
    for reward, expect in (("naive", 3.0), ("shaped", 5.0)):
        b = by[reward]["behaviour"]["bookings"]
        assert b["mean"] == pytest.approx(expect)
        assert b["ci"][0] < expect < b["ci"][1] and b["n_questions"] == 4
        assert "bookings" not in by[reward]["reward"]
        assert by[reward]["change"]["bookings"]["mean"] == pytest.approx(1.0)
    assert "last_room" not in by["naive"]["behaviour"]
    assert by["naive"]["behaviour"]["reads"]["mean"] == pytest.approx(2.0)
    report = (out / "report.md").read_text()
    assert "## By rooms" in report and "| rooms 1 | rooms 2 |" in report
    assert "task level" not in report
    section = report.split("## Behaviour (exploratory)")[1].split("\n## ")[0]
    head = next(line for line in section.splitlines() if line.startswith("| cell |"))
    assert head.endswith("| rooms booked |") and "last room" not in section
    row = next(line for line in section.splitlines() if line.startswith("| reward=naive |"))
    assert row.split(" | ")[-1].startswith("3.00 [")
    row = next(line for line in section.splitlines() if line.startswith("| reward=shaped |"))
    assert row.split(" | ")[-1].startswith("5.00 [")
    assert "Turns & Rooms booked \\\\" in (out / "behaviour.tex").read_text()
    assert "mean_bookings" in (out / "behaviour.csv").read_text().splitlines()[0]
    # the breakdown's files take the world's label (issue 63), never `hops`
    assert "Cell & rooms 1 & rooms 2 \\\\" in (out / "rooms.tex").read_text()
    assert (out / "rooms.csv").is_file() and not list(out.glob("hops.*"))


def test_the_figures_use_the_worlds_words(tmp_path):
    out, summary = _analyse(tmp_path)
    texts = [t for ax in figures.hops(summary, out)["_axes"] for t in ax["texts"]]
    assert "rooms" in texts
    drawn = figures.behaviour(summary, out)
    assert "bookings" in drawn
    assert "rooms booked" in [t for ax in drawn["_axes"] for t in ax["texts"]]


def test_runs_without_environment_json_keep_the_built_in_words(tmp_path):
    out, summary = _analyse(tmp_path, describe=False)
    assert "world" not in summary
    assert all("bookings" not in c["behaviour"] and "bookings" not in c["reward"]
               for c in summary["cells"])
    assert "## By task level" in (out / "report.md").read_text()


def test_runs_that_disagree_keep_the_first_label_or_the_built_in_word(tmp_path):
    from analysis.world import world_of
    runs = []
    for i, (rooms, booked) in enumerate((("rooms", "rooms booked"), ("beds", "beds"))):
        d = tmp_path / f"run{i}"
        d.mkdir()
        (d / "environment.json").write_text(json.dumps(
            {**HOTEL, "breakdown_label": rooms, "behaviour_labels": {"bookings": booked}}))
        runs.append(Run(path=d, config={}, seed=i, complete=True,
                        config_file=d / "config.yaml"))
    warnings: list = []
    assert world_of([Cell(factors={}, runs=runs)], warnings) == {
        "behaviour_labels": {"bookings": "rooms booked"}}
    assert len(warnings) == 2 and "different breakdown labels" in warnings[1]
