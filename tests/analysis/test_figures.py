"""Every published figure, rendered again from its committed summary.json, is one a paper
can use: no empty axis, no rate interval outside [0, 1], no count interval below 0, and
no label of another environment (issue 27, item 2)."""
import json
from pathlib import Path

import pytest

from analysis import figures
import re

from analysis.labels import FOREIGN_WORDS, level
from analysis.lifelong import KIND, QUANTITIES

# a raw override string: `reward=naive`, `+algo=grpo`, `state_change_bonus=True`
RAW_KEY = re.compile(r"(^|[\s(,;])\+?[A-Za-z_][\w.]*=\S")

REPO = Path(__file__).resolve().parents[2]
PUBLISHED = sorted(REPO.glob("experiments/*/results/report/summary.json"))


def check(summary: dict, drawn: dict) -> list[str]:
    """The problems of the figures `drawn` (figures.write_all's records) of `summary`."""
    bad = []
    foreign = FOREIGN_WORDS.get(summary.get("env"), ())
    for name, plotted in drawn.items():
        for i, ax in enumerate(plotted.get("_axes", [])):
            where = f"{name} axis {i} ({' / '.join(ax['texts'][:2])})"
            if not ax["has_data"]:
                bad.append(f"{where}: empty")
            if ax["kind"] == "rate" and any(v < 0 or v > 1 for v in ax["lo"] + ax["hi"]):
                bad.append(f"{where}: a rate interval outside [0, 1]")
            if ax["kind"] == "count" and any(v < 0 for v in ax["lo"]):
                bad.append(f"{where}: a count interval below 0")
            for t in ax["texts"]:
                if any(w in t.lower() for w in foreign):
                    bad.append(f"{where}: '{t}' is not a word of {summary['env']}")
                if RAW_KEY.search(t):
                    bad.append(f"{where}: '{t}' names a factor by its config key, not in words")
            if ax.get("unit") and ax["span"] < ax["unit"] * (1 - 1e-9):
                bad.append(f"{where}: spans {ax['span']:.3g}, less than one unit of its "
                           f"data ({ax['unit']:.3g})")
            if ax["lo"] and max(ax["hi"]) == min(ax["lo"]):
                bad.append(f"{where}: a constant panel (every value {ax['lo'][0]:g})")
            if ax.get("interval") and ax["lo"] and not any(
                    level(summary.get("alpha", 0.05)) in t or "±1 SE" in t
                    for t in ax["texts"] + ax.get("figure_texts", [])):
                bad.append(f"{where}: draws intervals without stating their level")
    return bad


@pytest.mark.parametrize("path", PUBLISHED, ids=[p.parents[2].name for p in PUBLISHED])
def test_published_figures_are_paper_ready(path, tmp_path):
    from analysis import endpoint_figure, trend_figure
    summary = json.loads(path.read_text())
    drawn = figures.write_all(summary, tmp_path, workers=1)
    drawn["trend"] = trend_figure.write(summary, tmp_path)    # analysis.cli draws them too
    drawn["endpoint"] = endpoint_figure.write(summary, tmp_path)
    assert check(summary, drawn) == []
    made = {p.stem for p in tmp_path.glob("*.png")}
    assert made == {p.stem for p in tmp_path.glob("*.pdf")}          # PDF beside PNG
    scripts = {p.name.split(".")[0] for p in path.parent.glob("*.caption.txt")}
    assert made | scripts == {p.stem for p in path.parent.glob("*.png")}   # as published
    assert not made & scripts and not set(figures.not_drawn(summary)) & made
    captions = (path.parent / "captions.md").read_text()
    assert all(f"**{name}**" in captions and (path.parent / f"figure_{name}.tex").is_file()
               for name in made | scripts)                           # every one captioned
    if len(summary["steps"]) and all(len(c.get("curve", {}).get("steps", [])) == 2
                                     for c in summary["cells"]):
        assert "learning_curves" not in made and "change" in made     # a paired change


INTERIM = sorted(REPO.glob("experiments/*/interim/summary.json"))


@pytest.mark.parametrize("path", INTERIM, ids=[p.parents[1].name for p in INTERIM])
def test_interim_figures_are_paper_ready_and_redrawn(path, tmp_path):
    """An interim look's frozen summary (reward_resolution's stage 1): its kept figures
    are the ones the current code draws from it."""
    summary = json.loads(path.read_text())
    drawn = figures.write_all(summary, tmp_path, workers=1)
    assert check(summary, drawn) == []
    assert {p.name for p in path.parent.glob("*.png")} <= {p.name for p in tmp_path.glob("*.png")}


@pytest.mark.parametrize("path", PUBLISHED, ids=[p.parents[2].name for p in PUBLISHED])
def test_the_finding_figure_shows_its_tables_numbers(path, tmp_path):
    """The finding figure draws each pre-registered primary comparison with the estimate,
    interval and p of the hypotheses table (or the comparisons or change table)."""
    summary = json.loads(path.read_text())
    if not summary.get("primary"):
        pytest.skip("no primary comparison named in analysis.yaml")
    drawn = figures.finding(summary, tmp_path)
    if "finding" in figures.not_drawn(summary):
        assert drawn == {} and not (tmp_path / "finding.png").exists()
        return
    # the one p its tables quote: the hypothesis' decision p, the comparison's p_quoted
    hyps = {(q["label"], q["vs"]): (q["delta"], q["ci"], q["p"], h["p_decision"])
            for h in summary.get("hypotheses") or [] for q in h["parts"]}
    comps = {(c["label"], c["vs"]): (c["delta"], c["ci"], c["p"], c.get("p_quoted"))
             for c in summary["comparisons"]}
    changes = {(c["label"], "step " + "/".join(map(str, ch["from_step"]))):
               (ch["mean"], ch["ci"], ch["p"], None) for c in summary["cells"]
               for ch in [(c.get("change") or {}).get(summary["metric"])] if ch}
    for row in drawn["parts"]:
        table = {"comparison": comps, "change": changes}.get(row["source"], hyps)
        assert table[(row["label"], row["vs"])] == (row["delta"], row["ci"], row["p"],
                                                    row["p_adj"])


def test_not_drawn_names_constant_figures():
    """Voyager's floor: every comparison 0 [0, 0] and every seed 0 (forest, seeds and the
    finding are not drawn, the report says why); a one-factor design has no
    factor_intervals; a change of exactly 0 everywhere is not a figure."""
    path = REPO / "experiments/voyager_coderepair/results/report/summary.json"
    why = figures.not_drawn(json.loads(path.read_text()))
    assert {"forest", "seeds", "finding", "factor_intervals"} <= set(why)
    report = (path.parent / "report.md").read_text()
    assert all(f"{name} ({reason})" in report for name, reason in why.items())
    s = {"cells": [{"seed_means": [0.1, 0.2], "change": {"correct": {
        "mean": 0.0, "ci": [0.0, 0.0], "from_step": [0]}}}], "metric": "correct",
         "factors": ["a", "b"], "comparisons": [{"family": "confirmatory", "delta": 0.1,
                                                  "ci": [0.0, 0.2]}]}
    assert set(figures.not_drawn(s)) == {"change"}


def test_the_check_fails_on_each_defect():
    summary = {"env": "coderepair"}
    ax = {"texts": ["hops"], "has_data": False, "kind": "rate", "lo": [-0.1], "hi": [0.5]}
    cnt = {"texts": ["x"], "has_data": True, "kind": "count", "lo": [-1.78], "hi": [5.6]}
    bad = check(summary, {"f": {"_axes": [ax, cnt]}})
    assert len(bad) == 4 and "empty" in bad[0] and "outside [0, 1]" in bad[1]
    assert "not a word of coderepair" in bad[2] and "below 0" in bad[3]
    raw = {"texts": ["reward=naive", "+algo=grpo"], "has_data": True, "kind": None,
           "lo": [0.1], "hi": [0.2], "interval": True, "figure_texts": []}
    bad = check(summary, {"f": {"_axes": [raw]}})
    assert len(bad) == 3 and all("config key" in b for b in bad[:2])
    assert "without stating their level" in bad[2]
    ok = {**raw, "texts": ["reward: naive"], "figure_texts": ["95% t intervals over seeds"]}
    assert check(summary, {"f": {"_axes": [ok]}}) == []
    narrow = {**ok, "unit": 100 / 32, "span": 0.08}             # 99.96-100.04% of 32 q.
    assert "less than one unit" in check(summary, {"f": {"_axes": [narrow]}})[0]
    flat = {**ok, "lo": [0.0, 0.0], "hi": [0.0, 0.0]}           # an all-zero panel
    assert "constant panel" in check(summary, {"f": {"_axes": [flat]}})[0]


# the lifelong figure of real short voyager-vs-react sweeps (tests/fixtures/voyager_lifelong)
LIFELONG = sorted(p for p in (REPO / "tests" / "fixtures" / "voyager_lifelong").iterdir()
                  if p.is_dir())


def lifelong_summary(sweep: Path) -> dict:
    from analysis.collect import collect
    from analysis.summary import analyse
    return analyse(collect([sweep]), baseline={"agent.name": "react"}, B=200)


@pytest.mark.parametrize("sweep", LIFELONG, ids=[p.name for p in LIFELONG])
def test_lifelong_figure_is_paper_ready(sweep, tmp_path):
    """One axis per quantity (library, skills used, held-out solve rate, forgetting),
    each with data, rates inside [0, 1], counts >= 0, the environment's words; PNG + PDF."""
    summary = lifelong_summary(sweep)
    drawn = figures.write_all(summary, tmp_path, workers=1)
    assert check(summary, drawn) == []
    panels, constant = figures.lifelong_panels(summary)
    assert sorted(panels + list(constant)) == sorted(QUANTITIES)   # drawn or named
    if not panels:                          # every quantity constant: no figure at all
        assert drawn["lifelong"] == {} and not (tmp_path / "lifelong.png").exists()
        return
    axes = drawn["lifelong"]["_axes"]
    assert [a["kind"] for a in axes] == [KIND[q] for q in panels]
    assert all(len({v for v in a["lo"] + a["hi"]}) > 1 for a in axes)
    solve = "held-out repair rate (%)" if summary["env"] == "coderepair" \
        else "held-out solve rate (%)"
    assert solve in [a["texts"][0] for a in axes]
    assert {"lifelong.png", "lifelong.pdf"} <= {p.name for p in tmp_path.iterdir()}
    voyager = [c for c in summary["cells"] if c["factors"]["agent.name"] == "voyager"]
    react = [c for c in summary["cells"] if c["factors"]["agent.name"] == "react"]
    assert set(drawn["lifelong"]["library_size"]) == {c["label"] for c in voyager}
    assert set(drawn["lifelong"]["solve_rate"]) == {c["label"] for c in voyager + react}


def test_a_field_the_same_in_every_cell_is_named_not_drawn(tmp_path):
    """One turn in every reasoning-gym episode: no behaviour panel of identical points and
    no change panel of zero changes (the published smollm report), the fields named in the
    title instead; a field that varies is drawn."""
    from analysis.tables import behaviour_panels
    path = REPO / "experiments/smollm_reasoning_gym/results/report/summary.json"
    summary = json.loads(path.read_text())
    assert behaviour_panels(summary) == (["answer_rate"], {"mean_turns": 1.0})
    axes = figures.behaviour(summary, tmp_path)["_axes"]
    assert [a["texts"][0] for a in axes] == ["answer rate (%)"]
    change = figures.change(summary, tmp_path)["_axes"]          # answer rate, turns: 0
    assert [a["texts"][0] for a in change] == ["held-out accuracy"]
    summary["cells"][0]["behaviour"]["mean_turns"] = {"mean": 1.5, "ci": [1.0, 2.0]}
    summary["cells"][0]["change"]["mean_turns"] = {"mean": 0.5, "ci": [0.0, 1.0]}
    drawn, constant = behaviour_panels(summary)
    assert drawn == ["answer_rate", "mean_turns"] and constant == {}
    change = figures.change(summary, tmp_path)["_axes"]
    assert [a["texts"][0] for a in change] == ["held-out accuracy", "turns"]


def test_a_change_interval_holds_only_values_the_change_can_take():
    """A rate that started at p0 moves within [-p0, 1 - p0]; a count falls by at most its
    start (summary.feasible). naive_trap's "I don't know" changes, from about 1%, were
    [-22, +22] points under a variance pooled with the naive arm's 87%/1% seeds."""
    from analysis.summary import feasible
    assert feasible([-0.2, 0.2], "rate", 0.01) == [-0.01, 0.2]
    assert feasible([-0.2, 0.2], "rate", 0.9) == pytest.approx([-0.2, 0.1])
    assert feasible([-3.0, 2.0], "count", 1.5) == [-1.5, 2.0]
    assert feasible([-3.0, 2.0], None, 1.5) == [-3.0, 2.0]
    path = REPO / "experiments/naive_trap/results/report/summary.json"
    for c in json.loads(path.read_text())["cells"]:
        lo, hi = c["change"]["idk_rate"]["ci"]
        assert lo >= -0.02 and (hi < 0.05 or c["factors"]["reward.name"] == "naive")


def test_the_endpoint_figure_draws_each_cells_rate_interval_and_p(tmp_path):
    """penalty_dose's collapse endpoint: each cell's rate, exact interval and Fisher p as
    its summary holds them, a paper-ready figure with a caption; none without an endpoint."""
    from analysis import endpoint_figure
    path = REPO / "experiments" / "penalty_dose" / "results" / "report" / "summary.json"
    summary = json.loads(path.read_text())
    e = summary["endpoint"]
    drawn = endpoint_figure.endpoint(summary, tmp_path)
    assert drawn["rate"] == [c["rate"] for c in e["cells"]]
    assert drawn["ci"] == [c["ci"] for c in e["cells"]]
    p = {c["label"]: c["p_quoted"] for c in e["comparisons"]}
    assert drawn["p"] == [p.get(c["label"]) for c in e["cells"]]
    assert drawn["p"][0] is None and sum(c["k"] for c in e["cells"]) >= 1
    assert check(summary, {"endpoint": drawn}) == []
    assert e["words"] in endpoint_figure.caption(summary)
    assert endpoint_figure.endpoint({**summary, "endpoint": None}, tmp_path) == {}
    assert not (tmp_path / "endpoint.png").exists()
