"""The report names what ran (issue 63 item 4): its header and every figure caption name
the world, the reward scheme and its weights (summary.json `ran`, from the runs'
config.yaml: every weight 1.0 unless set); the breakdown's files take the world's
`breakdown_label` (the email world's stays `hops`); and `--metric reward/<component>`,
whose rows hold weight x component, is refused in one line naming the behaviour column
unless every run weights the component by 1 (weight 0 vs 0.5 came out "better")."""
import json

import pytest
import yaml

from analysis import cli, figures
from analysis.labels import breakdown_file

WRONG = {"a": 0.0, "b": 0.5}          # reward.weights.wrong of the two arms


def _row(w: float, seed: int, step: int, q: int, k: int) -> dict:
    correct = (q + seed + k) % 3 == 0
    wrong = -1.0 if not correct else 0.0          # every answer given, as naive counts it
    return {"step": step, "task_id": f"q{q}", "sample": k, "rooms": 1 + q // 2,
            "correct": correct, "answered": True, "turns": 3, "end_reason": "answer",
            "reward": float(correct) + w * wrong,
            "reward/correct": float(correct), "reward/wrong": w * wrong}


def _sweep(root, label: str = "rooms", weights=WRONG):
    """2 arms (reward.weights.wrong 0 and 0.5) x 3 seeds, 4 questions, 2 samples."""
    for arm, w in weights.items():
        for seed in range(3):
            d = root / f"arm={arm},seed={seed}"
            d.mkdir(parents=True)
            (d / "config.yaml").write_text(yaml.safe_dump(
                {"seed": seed, "arm": arm, "env": {"name": "hotel"},
                 "reward": {"name": "naive", "weights": {"correct": 1.0, "wrong": w}},
                 "trainer": {"max_steps": 4}}))
            (d / "eval.jsonl").write_text("".join(
                json.dumps({**_row(w, seed, step, q, k), label: 1 + q // 2})
                + "\n" for step in (0, 4) for q in range(4) for k in range(2)))
            (d / "environment.json").write_text(json.dumps(
                {"name": "hotel", "breakdown_label": label, "behaviour_labels": {}}))
            (d / "COMPLETE").write_text("")
    return root


def _analyse(tmp_path, *extra, label="rooms", weights=WRONG):
    out = tmp_path / "report"
    rc = cli.main([str(_sweep(tmp_path / "sweep", label, weights)), "--out", str(out),
                   "--baseline", "arm=a", "--B", "200", *extra])
    return rc, out


def test_header_and_captions_name_the_world_the_reward_and_its_weights(tmp_path):
    rc, out = _analyse(tmp_path)
    assert rc == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["ran"] == {"world": "hotel",
                              "reward": {"naive": {"correct": 1.0, "wrong": [0.0, 0.5]}}}
    said = "world hotel; reward naive (weights: correct 1, wrong 0 or 0.5 by cell)"
    report = (out / "report.md").read_text().splitlines()
    assert report[:3] == ["# Results: held-out accuracy", "", f"What ran: {said}."]
    captions = (out / "captions.md").read_text()
    drawn = [line for line in captions.splitlines() if line.startswith("**")]
    assert len(drawn) >= 4 and all(line.endswith(f"; {said}.") for line in drawn)
    assert f"; {said}." in (out / "figure_rooms.tex").read_text()


def test_a_default_weight_is_1_and_an_older_summary_says_nothing(tmp_path):
    rc, out = _analyse(tmp_path, "--no-figures", weights={"a": 1.0, "b": 1.0})
    cfg = tmp_path / "sweep" / "arm=a,seed=0" / "config.yaml"
    assert rc == 0
    old = yaml.safe_load(cfg.read_text())
    del old["reward"]["weights"]                      # a run that set no weight
    cfg.write_text(yaml.safe_dump(old))
    assert cli.main([str(tmp_path / "sweep"), "--out", str(out), "--baseline", "arm=a",
                     "--B", "200", "--no-figures"]) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["ran"]["reward"] == {"naive": {"correct": 1.0, "wrong": 1.0}}
    del summary["ran"]
    assert figures._design(summary).endswith("analysed at step 4")


def test_reward_component_with_different_weights_is_refused_naming_the_column(
        tmp_path, capsys):
    rc, out = _analyse(tmp_path, "--metric", "reward/wrong", "--no-figures")
    err = capsys.readouterr().err.strip()
    assert rc == 2 and len(err.splitlines()) == 1 and not out.exists()
    assert err.startswith("analysis: error: --metric reward/wrong: reward.weights.wrong is "
                          "not 1 in every run (arm=a, reward.weights.wrong=0: 0; arm=b, "
                          "reward.weights.wrong=0.5: 0.5)")
    assert err.endswith("--metric correct and --metric answered (a wrong answer: "
                        "answered, not correct)")


def test_reward_component_weighted_1_everywhere_is_the_component(tmp_path):
    rc, out = _analyse(tmp_path, "--metric", "reward/wrong", "--no-figures",
                       weights={"a": 1.0, "b": 1.0})
    assert rc == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["metric"] == "reward/wrong"
    # the same rows in both arms: every wrong answer is -1 in each
    assert summary["comparisons"][0]["delta"] == pytest.approx(0.0)


@pytest.mark.parametrize("label, stem", [("rooms", "rooms"), ("hops", "hops"),
                                         ("seeds", "by_seeds"), ("bed size", "bed_size")])
def test_breakdown_files_take_the_worlds_label(tmp_path, label, stem):
    rc, out = _analyse(tmp_path, label=label)
    assert rc == 0
    summary = json.loads((out / "summary.json").read_text())
    assert breakdown_file(summary) == stem
    for ext in ("tex", "csv", "png", "pdf"):
        assert (out / f"{stem}.{ext}").is_file(), ext
    assert f"\\includegraphics[width=\\linewidth]{{\\ablatefigdir {stem}.pdf}}" in (
        out / f"figure_{stem}.tex").read_text()
    assert f"**{stem}** ({stem}.png" in (out / "captions.md").read_text()
    assert stem == "hops" or not list(out.glob("*hops*"))
    report = (out / "report.md").read_text()
    assert f"seeds, {stem}, " in report and f"comparisons, {stem}, behaviour" in report
    assert figures.script_captions(out) == []       # the analysis' own figure: no script's
