"""Collecting runs, the summary contract, and report/tables/figures/CLI on fixture sweeps
written in the runner's shape (.hydra/config.yaml, eval.jsonl, metrics.jsonl, COMPLETE)."""
import csv
import json
import re
import math
import shutil
import subprocess
import sys
from types import SimpleNamespace
from collections import defaultdict
from pathlib import Path

import numpy as np
import pytest

from analysis import cli, figures
from analysis.collect import AnalysisError, collect, infer_factors
from analysis.labels import comparison_words
from analysis.summary import analyse
from analysis.synthetic import base_config, write_run, write_sweep
from analysis.report import p_is
from analysis.tables import COLUMN_CHARS, cell_width, fmt, fmt_ci, stacked, tex_minus

REPO = Path(__file__).resolve().parents[2]
FIGURES = ["learning_curves", "change", "seeds", "forest", "hops", "behaviour",
           "factor_intervals",
           "training"]
TABLES = ["results", "comparisons", "hops", "behaviour", "mde"]
BASE = {"reward": "naive", "algo": "dapo"}


@pytest.fixture(scope="module")
def sweep_dir(tmp_path_factory):
    root = tmp_path_factory.mktemp("sweep")
    write_sweep(root, seeds=(0, 1, 2), n_questions=30,
                effects={("shaped", "dapo"): 1.5, ("shaped", "grpo"): 0.8})
    return root


@pytest.fixture(scope="module")
def cli_out(sweep_dir, tmp_path_factory):
    out = tmp_path_factory.mktemp("out")
    proc = subprocess.run([sys.executable, "-m", "analysis", str(sweep_dir), "--out",
                           str(out), "--B", "1000", "--rng-seed", "3", "--baseline",
                           "reward=naive,algo=dapo", "--all-pairs"],
                          cwd=REPO, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    return out


@pytest.fixture(scope="module")
def summary(cli_out):
    return json.loads((cli_out / "summary.json").read_text())


# ---------------------------------------------------------------- collection
def test_factors_follow_group_names_and_skip_bookkeeping():
    cfgs = []
    for algo in ("grpo", "dapo"):
        for seed in (0, 1):
            c = base_config(seed, "shaped", algo)
            c["run"]["device"] = f"cpu{seed}"              # bookkeeping, ignored
            c["env"]["cache_dir"] = f"/cache/{seed}"        # a cache location, ignored
            cfgs.append(c)
    from analysis.collect import flatten
    flat = [flatten(c) for c in cfgs]
    # eps_high, loss_agg, overlong.enable differ only together with algo.name
    assert infer_factors(flat) == ["algo.name"]
    flat[0]["algo.eps_high"] = 0.3          # now eps_high varies within grpo
    assert infer_factors(flat) == ["algo.name", "algo.eps_high"]
    for f in flat:
        f["trainer.lr"] = 1e-4 if f["seed"] == 0 else 3e-4
    assert "trainer.lr" in infer_factors(flat) and "seed" not in infer_factors(flat)
    flat[0]["env.emails_path"] = "/data/other.jsonl"   # a path that differs: a factor
    assert "env.emails_path" in infer_factors(flat)


def test_a_key_written_only_by_a_newer_ablate_is_not_a_factor():
    """Seeds of one cell started before and after an upgrade that added a key (with its
    default) stay one cell, with a warning; a key that takes two values stays a factor."""
    from analysis.collect import added_keys
    old = {"seed": 0, "algo.name": "grpo"}
    new = [{"seed": s, "algo.name": "grpo", "harness.parser": "strict"} for s in (1, 2)]
    assert added_keys([old, *new]) == ["harness.parser"]
    assert infer_factors([old, *new]) == []
    new[1]["harness.parser"] = "lenient"
    assert added_keys([old, *new]) == []
    assert infer_factors([old, *new]) == ["harness.parser"]


def test_incomplete_failed_and_missing_cells_are_listed(tmp_path):
    write_sweep(tmp_path, rewards=("naive", "shaped"), algos=("grpo", "dapo"),
                seeds=(0, 1), n_questions=12, steps=(0, 4))
    (tmp_path / "reward=naive,algo=dapo,seed=1" / "COMPLETE").unlink()
    shutil.rmtree(tmp_path / "reward=shaped,algo=grpo,seed=0")
    shutil.rmtree(tmp_path / "reward=shaped,algo=grpo,seed=1")
    failed = tmp_path / "crashed"
    failed.mkdir()
    (failed / ".hydra").mkdir()
    cfg = (tmp_path / "reward=naive,algo=grpo,seed=0" / ".hydra" / "config.yaml").read_text()
    (failed / ".hydra" / "config.yaml").write_text(cfg.replace("seed: 0", "seed: 9"))
    (failed / "COMPLETE").write_text("")
    sw = collect([tmp_path])
    assert [c.label for c in sw.cells] == ["algo=dapo, reward=naive",
                                           "algo=dapo, reward=shaped",
                                           "algo=grpo, reward=naive"]
    assert [len(c.runs) for c in sw.cells] == [1, 2, 2]
    assert [i["seed"] for i in sw.incomplete] == [1]
    assert sw.failed[0]["reason"] == "no eval.jsonl" and sw.failed[0]["seed"] == 9
    assert sw.missing == [{"factors": {"algo.name": "grpo", "reward.name": "shaped"},
                           "reason": "no run in the grid"}]
    s = analyse(sw, B=200, baseline={"reward": "naive", "algo": "grpo"})
    assert s["cells"][0]["n_seeds"] == 1 and s["cells"][0]["question_noise_only"]
    one = [c for c in s["comparisons"] if c["a"] == sw.cells[0].factors][0]
    assert one["p"] is None and one["p_adj"] is None and one["verdict"] is None
    assert "one seed" in " ".join(one["warnings"])
    assert collect([tmp_path], include_incomplete=True).cells[0].seeds == (0, 1)


def test_corrupt_eval_jsonl_is_named(tmp_path, capsys):
    write_sweep(tmp_path, rewards=("naive",), algos=("grpo", "dapo"), seeds=(0,),
                n_questions=5, steps=(0,))
    bad = tmp_path / "reward=naive,algo=dapo,seed=0" / "eval.jsonl"
    lines = bad.read_text().splitlines()
    lines[3] = lines[3][:25]
    bad.write_text("\n".join(lines) + "\n")
    with pytest.raises(AnalysisError, match=r"eval\.jsonl: line 4 is not valid JSON"):
        analyse(collect([tmp_path]), B=100, baseline={"algo": "grpo"})
    assert cli.main([str(tmp_path), "--out", str(tmp_path / "o"), "--B", "100",
                     "--no-figures", "--baseline", "algo=grpo"]) == 2
    err = capsys.readouterr().err
    assert str(bad) in err and "line 4" in err


def test_estimates_average_per_question_first(tmp_path):
    """Question A: 3 samples, all correct; question B: 1 sample, wrong. Per-question means
    give 0.5 (pooled answers would give 0.75)."""
    d = tmp_path / "run"
    d.mkdir()
    (d / "config.yaml").write_text("seed: 0\nreward: {name: shaped}\n")
    rows = [{"step": 2, "task_id": "A", "sample": k, "hops": 1, "correct": True}
            for k in range(3)] + [{"step": 2, "task_id": "B", "sample": 0, "hops": 2,
                                   "correct": False},
                                  {"step": 1, "task_id": "B", "sample": 0, "hops": 2,
                                   "correct": True}]
    (d / "eval.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (d / "COMPLETE").write_text("")
    s = analyse(collect([tmp_path]), B=200)
    assert s["cells"][0]["mean"] == 0.5 and s["cells"][0]["step"] == 2
    assert s["cells"][0]["by_hops"]["1"]["mean"] == 1.0
    assert analyse(collect([tmp_path]), B=200, step=1)["cells"][0]["mean"] == 1.0


def test_one_task_level_gets_no_breakdown(tmp_path):
    """Every task at one level (a reasoning-gym task set): no 'by level' table, figure or
    report section that would repeat the cell estimate; two levels keep them."""
    from analysis import report, tables
    d = tmp_path / "run"
    d.mkdir()
    (d / "config.yaml").write_text("seed: 0\nreward: {name: shaped}\n")
    rows = [{"step": 2, "task_id": q, "sample": 0, "hops": 1, "correct": q == "A"}
            for q in "ABC"]
    (d / "eval.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (d / "COMPLETE").write_text("")
    s = analyse(collect([tmp_path]), B=100)
    assert s["hops"] == [] and s["cells"][0]["by_hops"]["1"]["mean"] == pytest.approx(1 / 3)
    out = tmp_path / "out"
    out.mkdir()
    (out / "hops.csv").write_text("stale")
    tables.write_all(s, out)
    assert not (out / "hops.csv").exists() and not (out / "hops.tex").exists()
    assert figures.hops(s, out) == {} and "## By" not in report.render(s)
    rows[1]["hops"] = 2
    (d / "eval.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    s = analyse(collect([tmp_path]), B=100)
    assert s["hops"] == ["1", "2"] and "## By task level" in report.render(s)


# ---------------------------------------------------------------- summary values
def _manual_cell_means(sweep_dir, step=None):
    """Independent re-computation from the files: per-question mean over samples, mean
    over questions per seed, mean over seeds."""
    out = defaultdict(list)
    for ev in sorted(Path(sweep_dir).glob("*/eval.jsonl")):
        rows = [json.loads(x) for x in ev.read_text().splitlines()]
        s = step if step is not None else max(r["step"] for r in rows)
        per_q = defaultdict(list)
        for r in rows:
            if r["step"] == s:
                per_q[r["task_id"]].append(float(r["correct"]))
        reward, algo, _ = ev.parent.name.split(",")
        out[(algo.split("=")[1], reward.split("=")[1])].append(
            np.mean([np.mean(v) for v in per_q.values()]))
    return {k: float(np.mean(v)) for k, v in out.items()}


def test_summary_contract_and_values(summary, sweep_dir):
    assert set(summary) >= {"cells", "comparisons", "bootstrap"}
    assert summary["bootstrap"] == {**summary["bootstrap"], "B": 1000, "rng_seed": 3}
    manual = _manual_cell_means(sweep_dir)
    assert len(summary["cells"]) == 4
    for c in summary["cells"]:
        assert set(c) >= {"factors", "n_seeds", "n_questions", "mean", "ci", "seed_means"}
        assert set(c["factors"]) == {"algo.name", "reward.name"}
        assert c["n_seeds"] == 3 and c["n_questions"] == 30
        assert c["mean"] == pytest.approx(manual[(c["factors"]["algo.name"],
                                                  c["factors"]["reward.name"])], abs=1e-12)
        assert c["mean"] == pytest.approx(np.mean(c["seed_means"]), abs=1e-12)
        assert c["ci"][0] < c["mean"] < c["ci"][1]
        assert set(c["behaviour"]) >= {"keywords_per_search", "searches", "answer_rate",
                                       "idk_rate", "fabricated_source_rate", "mean_turns"}
        for v in c["behaviour"].values():
            assert v["ci"][0] <= v["mean"] <= v["ci"][1]
        assert set(c["reward"]) == {"reward", "reward/process", "reward/witness",
                                    "reward/correctness"}
    for cmp in summary["comparisons"]:
        assert set(cmp) >= {"a", "b", "delta", "ci", "p", "p_adj", "family", "mde"}
        assert cmp["p"] <= cmp["p_adj"] <= 1 and cmp["n_questions"] == 30
        assert cmp["verdict"] in {"better", "worse", "equivalent", "inconclusive"}
        # one interval construction: significant exactly when the 95% CI excludes 0
        assert (cmp["p"] < 0.05) == (cmp["ci"][0] > 0 or cmp["ci"][1] < 0)
        if cmp["verdict"] in ("better", "worse"):
            assert cmp["p_adj"] < 0.05 and (cmp["delta"] > 0) == (cmp["verdict"] == "better")
    fam = defaultdict(int)
    for cmp in summary["comparisons"]:
        fam[(cmp["family"], cmp["kind"])] += 1
    assert fam == {("confirmatory", "cell"): 3, ("confirmatory", "main_effect"): 2,
                   ("all_pairs", "cell"): 6}
    # the large shaped+dapo effect is detected against the baseline (dapo, naive)
    best = [c for c in summary["comparisons"] if c["family"] == "confirmatory"
            and c["a"] == {"algo.name": "dapo", "reward.name": "shaped"}][0]
    assert best["delta"] > 0.15 and best["verdict"] == "better"
    assert best["label"] == "reward=shaped" and best["vs"] == "reward=naive"
    assert summary["baseline_source"] == "--baseline" and summary["sesoi"] == 0.03


def test_identical_cells_through_the_pipeline(tmp_path):
    write_sweep(tmp_path, rewards=("naive", "shaped"), algos=("grpo",), seeds=(0, 1, 2),
                n_questions=20, steps=(0, 3), identical=True)
    s = analyse(collect([tmp_path]), B=500, baseline={"reward": "naive"})
    (c,) = [c for c in s["comparisons"] if c["family"] == "confirmatory"]
    # the same data in two cells: no difference; seeds count as independent runs
    assert c["delta"] == 0.0 and c["p"] == 1.0 and c["ci"][0] < 0 < c["ci"][1]
    assert c["verdict"] in ("equivalent", "inconclusive")


def test_baseline_option_and_swap(sweep_dir):
    sw = collect([sweep_dir])
    s = analyse(sw, B=500, baseline={"reward": "shaped", "algo": "grpo"}, with_curves=False)
    assert s["baseline_label"] == "algo=grpo, reward=shaped"
    s0 = analyse(collect([sweep_dir]), B=500, with_curves=False, baseline=BASE,
                 all_pairs=True)
    d = {(c["a_label"], c["b_label"]): c for c in s["comparisons"]
         if c["family"] == "confirmatory" and c["kind"] == "cell"}
    n = 0
    for c in s0["comparisons"]:        # the same pairs, computed for another baseline
        if c["family"] == "all_pairs" and (c["a_label"], c["b_label"]) in d:
            o = d[(c["a_label"], c["b_label"])]
            assert o["delta"] == c["delta"] and o["ci"] == c["ci"] and o["p"] == c["p"]
            n += 1
    assert n == 3
    with pytest.raises(AnalysisError, match="matches 2 cells"):
        analyse(collect([sweep_dir]), B=100, baseline={"reward": "shaped"})
    # no silent default: more than one cell and no baseline is an error
    with pytest.raises(AnalysisError, match="no baseline"):
        analyse(collect([sweep_dir]), B=100)
    assert not [c for c in analyse(collect([sweep_dir]), B=100, baseline=BASE,
                                   with_curves=False)["comparisons"]
                if c["family"] == "all_pairs"]           # all pairs are opt-in


# ---------------------------------------------------------------- rendered outputs
def test_cli_writes_all_files(cli_out):
    names = {p.name for p in cli_out.iterdir()}
    expected = {"summary.json", "report.md"} | {f"{t}.{e}" for t in TABLES
                                                for e in ("tex", "csv")} \
        | {f"{f}.{e}" for f in FIGURES for e in ("png", "pdf")}
    assert expected <= names
    for f in FIGURES:
        assert (cli_out / f"{f}.png").read_bytes()[:4] == b"\x89PNG"
        assert (cli_out / f"{f}.pdf").read_bytes()[:4] == b"%PDF"


def test_report_numbers_equal_summary(cli_out, summary):
    text = (cli_out / "report.md").read_text()
    assert "Baseline: **algo=dapo, reward=naive** (from --baseline)" in text
    assert "SESOI): ±3.0 points" in text
    for c in summary["cells"]:
        line = [x for x in text.splitlines() if x.startswith(f"| {c['label']} |")][0]
        assert f"| {c['n_seeds']} | {c['n_questions']} | {fmt(c['mean'])} | " \
               f"{fmt_ci(c['ci'])}" in line
    for c in summary["comparisons"]:
        sentence = [x for x in text.splitlines()
                    if x.startswith(f"- {c['label']} vs {c['vs']}:")]
        assert sentence, c["label"]
        s = sentence[0]
        assert f"Δ = {fmt(c['delta'], True, True)}" in s
        assert f"95% CI {fmt(c['ci'][0], True, True)} to {fmt(c['ci'][1], True, True)}" in s
        # one p, the one every output quotes, named by its test and family (issue 65)
        assert f"{p_is(c['p_quoted'])} ({c['p_quoted_words']})" in s
        assert f"— {c['verdict']}:" in s
    for r in summary["mde_table"]["rows"]:      # each MDE with its 95% range
        assert f"| {r['seeds']} | " + " | ".join(
            f"{fmt(v)} {fmt_ci(g)}" for v, g in zip(r["mde"], r["range"])) + " |" in text
    assert "## Behaviour" in text and "\"I don't know\" rate (%)" in text


def _tex_rows(tex: str) -> list[list[str]]:
    body = tex.split("\\midrule")[1].split("\\bottomrule")[0]
    return [r.split(" & ") for r in body.strip().split(" \\\\\n") if r.strip()]


def test_tables_numbers_equal_summary(cli_out, summary):
    with open(cli_out / "results.csv") as fh:
        rows = list(csv.DictReader(fh))
    tex = (cli_out / "results.tex").read_text()
    assert "\\toprule" in tex and "\\bottomrule" in tex and "Held-out accuracy" in tex
    for c, r in zip(summary["cells"], rows):
        assert float(r["mean"]) == c["mean"] and int(r["n_questions"]) == c["n_questions"]
        assert [float(r["ci_lo"]), float(r["ci_hi"])] == c["ci"]
        assert tex_minus(stacked(fmt(c["mean"]), fmt_ci(c["ci"]))) in tex
    with open(cli_out / "comparisons.csv") as fh:
        crow = list(csv.DictReader(fh))
    assert len(crow) == len(summary["comparisons"])
    for c, r in zip(summary["comparisons"], crow):
        assert float(r["delta"]) == c["delta"] and float(r["p_adj"]) == c["p_adj"]
        assert [float(r["ci_lo"]), float(r["ci_hi"])] == c["ci"] and r["family"] == c["family"]
    with open(cli_out / "mde.csv") as fh:
        m = list(csv.reader(fh))[1:]
    # each MDE followed by its 95% range (the components' df)
    assert [[float(x) for x in r[1::3]] for r in m] == [r["mde"] for r in
                                                       summary["mde_table"]["rows"]]
    assert [[[float(x) for x in r[i:i + 2]] for i in range(2, len(r), 3)] for r in m] == \
        [r["range"] for r in summary["mde_table"]["rows"]]


def test_latex_tables_are_well_formed_and_fit_a_column(cli_out, summary):
    """Structural check (no TeX engine on the test machines): booktabs, one family per
    comparison table, every row with the header's column count, braces balanced, and
    comparison rows short enough for a single-column float (about 60 characters of
    text at \\small)."""
    for name in TABLES + ["comparisons_all_pairs"]:
        tex = (cli_out / f"{name}.tex").read_text()
        assert tex.count("{") - tex.count("\\{") == tex.count("}") - tex.count("\\}")
        align = tex.split("\\begin{tabular}{")[1].split("}")[0]
        header = tex.split("\\toprule\n")[1].split(" \\\\")[0].split(" & ")
        assert len(header) == len(align), name
        for row in _tex_rows(tex):
            assert len(row) == len(align), (name, row)
    conf = (cli_out / "comparisons.tex").read_text()
    pairs = (cli_out / "comparisons_all_pairs.tex").read_text()
    assert "\\begin{table}[t]" in conf and "Holm" in conf and "Benjamini" not in conf
    assert "Benjamini" in pairs and len(_tex_rows(conf)) == 5 and len(_tex_rows(pairs)) == 6
    for row in _tex_rows(conf):
        assert sum(cell_width(c) + 1 for c in row) <= COLUMN_CHARS, row
    body = conf.split("\\midrule")[1]
    assert not re.search(r"(?<![$A-Za-z0-9.])-\d", body)       # minus signs, not hyphens


def test_figures_plot_summary_numbers(summary, tmp_path):
    plotted = figures.write_all(summary, tmp_path)
    conf = [c for c in summary["comparisons"] if c["family"] == "confirmatory"]
    assert plotted["forest"]["delta"] == [c["delta"] for c in conf]
    assert plotted["forest"]["ci"] == [c["ci"] for c in conf]
    assert plotted["forest"]["labels"] == [comparison_words(summary, c) for c in conf]
    for c in summary["cells"]:
        assert plotted["hops"][c["label"]]["mean"] == [c["by_hops"][h]["mean"]
                                                        for h in summary["hops"]]
        cur = plotted["learning_curves"][c["label"]]
        assert cur["mean"] == c["curve"]["mean"] and cur["lo"] == c["curve"]["lo"]
        # the last point of the curve is the table's estimate with the table's interval
        assert c["curve"]["mean"][-1] == pytest.approx(c["mean"], abs=1e-12)
        assert [c["curve"]["lo"][-1], c["curve"]["hi"][-1]] == pytest.approx(c["ci"])
    assert set(plotted["behaviour"]) >= {"answer_rate", "mean_turns", "idk_rate"}
    for c in summary["cells"]:
        for key in ("reward/mean", "accuracy"):
            assert plotted["training"][key][c["label"]] == c["train_curves"][key]["mean"]
    levels = plotted["factor_intervals"]["reward.name"]
    fl = {r["level"]: r for r in summary["factor_levels"] if r["factor"] == "reward.name"}
    assert levels["shaped"] == (fl["shaped"]["mean"], fl["shaped"]["ci"])
    assert math.isclose(fl["shaped"]["mean"], np.mean(
        [c["mean"] for c in summary["cells"] if c["factors"]["reward.name"] == "shaped"]))


def test_parallel_figures_plot_the_same_numbers(summary, tmp_path):
    seq = figures.write_all(summary, tmp_path / "seq", workers=1)
    par = figures.write_all(summary, tmp_path / "par", workers=2)
    assert par == seq
    assert {p.name for p in (tmp_path / "par").iterdir()} == \
        {p.name for p in (tmp_path / "seq").iterdir()}


def test_plain_config_yaml_runs_and_single_cell(tmp_path):
    rng = np.random.default_rng(0)
    for s in (0, 1):
        write_run(tmp_path / f"s{s}", base_config(s), rng, np.zeros(10),
                  np.ones(10, int), steps=(0, 2), hydra=False)
    s = analyse(collect([tmp_path]), B=200)
    assert len(s["cells"]) == 1 and s["cells"][0]["factors"] == {} and s["comparisons"] == []
    assert s["cells"][0]["n_seeds"] == 2


def test_corrupt_metrics_jsonl_is_named(tmp_path):
    write_sweep(tmp_path, rewards=("naive",), algos=("grpo",), seeds=(0,), n_questions=4,
                steps=(0,))
    bad = tmp_path / "reward=naive,algo=grpo,seed=0" / "metrics.jsonl"
    bad.write_text('{"step": 1, "accuracy": 0.1}\nnot json\n')
    with pytest.raises(AnalysisError, match=r"metrics\.jsonl: line 2 is not valid JSON"):
        analyse(collect([tmp_path]), B=100)


def test_spec_file_sets_baseline_and_b(sweep_dir, tmp_path):
    spec = tmp_path / "analysis.yaml"
    spec.write_text("baseline: {reward.name: shaped, algo.name: grpo, model.name: tiny}\n"
                    "metric: correct\nB: 300\nrng_seed: 4\n")
    out = tmp_path / "o"
    assert cli.main([str(sweep_dir), "--out", str(out), "--spec", str(spec),
                     "--no-figures"]) == 0
    s = json.loads((out / "summary.json").read_text())
    assert s["baseline_label"] == "algo=grpo, reward=shaped"
    assert s["baseline_source"] == str(spec)
    assert s["bootstrap"]["B"] == 300 and s["bootstrap"]["rng_seed"] == 4
    assert cli.main([str(sweep_dir), "--out", str(out), "--spec", str(spec), "--B", "200",
                     "--no-figures"]) == 0
    assert json.loads((out / "summary.json").read_text())["bootstrap"]["B"] == 200


def test_spec_lower_is_better_flips_the_words_and_unknown_keys_are_named(sweep_dir, tmp_path,
                                                                         capsys):
    spec = tmp_path / "analysis.yaml"
    base = "baseline: {reward.name: shaped, algo.name: grpo, model.name: tiny}\nB: 200\n"
    out = {}
    for low in ("false", "true"):
        spec.write_text(base + f"lower_is_better: {low}\n")
        out[low] = tmp_path / low
        assert cli.main([str(sweep_dir), "--out", str(out[low]), "--spec", str(spec),
                         "--no-figures"]) == 0
    plain, low = (json.loads((out[k] / "summary.json").read_text()) for k in ("false", "true"))
    assert low["lower_is_better"] is True and plain["lower_is_better"] is False
    swap = {"better": "worse", "worse": "better"}
    assert [swap.get(c["verdict"], c["verdict"]) for c in plain["comparisons"]] == \
        [c["verdict"] for c in low["comparisons"]]
    assert any(c["verdict"] in swap for c in plain["comparisons"])   # the test can fail
    assert "negative (lower is better)" in (out["true"] / "report.md").read_text()
    spec.write_text(base + "seosi: 0.02\n")
    assert cli.main([str(sweep_dir), "--out", str(tmp_path / "x"), "--spec", str(spec),
                     "--no-figures"]) == 2
    err = capsys.readouterr().err
    assert "unknown key(s) seosi" in err and "sesoi" in err
    spec.write_text(base + "lower_is_better: maybe\n")
    assert cli.main([str(sweep_dir), "--out", str(tmp_path / "y"), "--spec", str(spec),
                     "--no-figures"]) == 2
    assert "lower_is_better is 'maybe'" in capsys.readouterr().err


# ---------------------------------------------------------------- inputs, shared questions
def _rows(path):
    return [json.loads(x) for x in path.read_text().splitlines()]


def _write_rows(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_string_values_are_errors_naming_file_and_line(tmp_path, capsys):
    write_sweep(tmp_path, rewards=("naive",), algos=("grpo", "dapo"), seeds=(0, 1),
                n_questions=6, steps=(0,))
    bad = tmp_path / "reward=naive,algo=dapo,seed=1" / "eval.jsonl"
    rows = _rows(bad)
    rows[4]["correct"] = "yes"
    _write_rows(bad, rows)
    with pytest.raises(AnalysisError, match=r"eval\.jsonl:5: 'correct' is 'yes' \(str\)"):
        analyse(collect([tmp_path]), B=100, baseline={"algo": "grpo"})
    assert cli.main([str(tmp_path), "--out", str(tmp_path / "o"), "--baseline", "algo=grpo",
                     "--no-figures"]) == 2
    err = capsys.readouterr().err
    assert f"{bad}:5" in err and "Traceback" not in err


def test_empty_eval_file_is_listed_not_fatal(tmp_path):
    write_sweep(tmp_path, rewards=("naive",), algos=("grpo", "dapo"), seeds=(0, 1, 2),
                n_questions=8, steps=(0,))
    empty = tmp_path / "reward=naive,algo=dapo,seed=2" / "eval.jsonl"
    empty.write_text("")
    s = analyse(collect([tmp_path]), B=100, baseline={"algo": "grpo"}, with_curves=False)
    assert [f["reason"] for f in s["failed"]] == ["eval.jsonl is empty"]
    assert s["failed"][0]["path"] == str(empty.parent)
    assert [c["n_seeds"] for c in s["cells"]] == [2, 3]


def test_unequal_question_sets_use_the_intersection_with_a_warning(tmp_path):
    write_sweep(tmp_path, rewards=("naive",), algos=("grpo", "dapo"), seeds=(0, 1, 2),
                n_questions=20, steps=(0,))
    for s in (0, 1, 2):                    # dapo evaluated only the first 12 questions
        f = tmp_path / f"reward=naive,algo=dapo,seed={s}" / "eval.jsonl"
        _write_rows(f, [r for r in _rows(f) if int(r["task_id"][1:]) < 12])
    s = analyse(collect([tmp_path]), B=100, baseline={"algo": "grpo"}, with_curves=False)
    assert [c["n_questions"] for c in s["cells"]] == [12, 20]
    (c,) = s["comparisons"]
    assert c["n_questions"] == 12 and "different question sets (12 vs 20)" in c["warnings"][0]
    grpo = [_rows(tmp_path / f"reward=naive,algo=grpo,seed={k}" / "eval.jsonl")
            for k in (0, 1, 2)]
    dapo = [_rows(tmp_path / f"reward=naive,algo=dapo,seed={k}" / "eval.jsonl")
            for k in (0, 1, 2)]

    def mean(runs):   # per question over samples, then questions, then seeds
        out = []
        for rows in runs:
            per_q = defaultdict(list)
            for r in rows:
                if int(r["task_id"][1:]) < 12:
                    per_q[r["task_id"]].append(float(r["correct"]))
            out.append(np.mean([np.mean(v) for v in per_q.values()]))
        return np.mean(out)
    assert c["delta"] == pytest.approx(mean(dapo) - mean(grpo), abs=1e-12)
    report = __import__("analysis.report", fromlist=["render"]).render(s)
    assert "## Warnings" in report and "different question sets" in report


def test_disjoint_question_sets_are_never_compared(tmp_path):
    write_sweep(tmp_path, rewards=("naive",), algos=("grpo", "dapo"), seeds=(0, 1),
                n_questions=10, steps=(0,))
    for s in (0, 1):
        f = tmp_path / f"reward=naive,algo=dapo,seed={s}" / "eval.jsonl"
        _write_rows(f, [{**r, "task_id": "other-" + r["task_id"]} for r in _rows(f)])
    s = analyse(collect([tmp_path]), B=100, baseline={"algo": "grpo"}, with_curves=False)
    (c,) = s["comparisons"]
    assert c["delta"] is None and c["p"] is None and c["verdict"] is None
    assert c["n_questions"] == 0 and "no shared questions" in " ".join(s["warnings"])


def test_mixed_evaluation_settings_warn(tmp_path):
    rng = np.random.default_rng(0)
    for k, samples in ((0, 2), (1, 4)):
        for s in (0, 1):
            cfg = base_config(s, "shaped", "grpo")
            cfg["eval"]["samples"] = samples
            write_run(tmp_path / f"k{samples}_s{s}", cfg, rng, np.zeros(8), np.ones(8, int),
                      steps=(0,), K=samples)
    s = analyse(collect([tmp_path]), B=100, baseline={"eval.samples": 2}, with_curves=False)
    text = " ".join(s["warnings"])
    assert "cells differ in evaluation settings (eval.samples)" in text
    assert "different samples per question (eval.samples 4 vs 2)" in text


def test_mixed_experiments_and_bad_sesoi_are_named(tmp_path, capsys):
    rng = np.random.default_rng(0)
    for name in ("enronhop_rewards", "enronhop_paper"):
        cfg = base_config(0, "shaped", "grpo")
        cfg["experiment"] = name
        write_run(tmp_path / name, cfg, rng, np.zeros(6), np.ones(6, int), steps=(0,))
    sw = collect([tmp_path])
    assert "runs of different experiments are mixed" in sw.warnings[0]
    assert str(tmp_path / "enronhop_paper" / ".hydra" / "config.yaml") in sw.warnings[0]
    spec = tmp_path / "analysis.yaml"
    spec.write_text("sesoi: three points\n")
    assert cli.main([str(tmp_path), "--out", str(tmp_path / "o"), "--spec", str(spec),
                     "--no-figures"]) == 2
    err = capsys.readouterr().err
    assert f"{spec}: sesoi (or --sesoi) is 'three points'" in err


def test_seeds_at_different_steps_warn(tmp_path):
    write_sweep(tmp_path, rewards=("naive",), algos=("grpo", "dapo"), seeds=(0, 1),
                n_questions=8, steps=(0, 4))
    f = tmp_path / "reward=naive,algo=dapo,seed=1" / "eval.jsonl"
    _write_rows(f, [r for r in _rows(f) if r["step"] == 0])
    s = analyse(collect([tmp_path]), B=100, baseline={"algo": "grpo"}, with_curves=False)
    text = " ".join(s["warnings"])
    assert "algo=dapo: its seeds are analysed at different steps (0/4)" in text
    assert "evaluated at different steps (0/4 vs 4)" in text
    aligned = analyse(collect([tmp_path]), B=100, baseline={"algo": "grpo"}, step=0,
                      with_curves=False)
    assert not [w for w in aligned["warnings"] if "step" in w]


@pytest.mark.skipif(shutil.which("pdflatex") is None, reason="no TeX engine installed")
def test_latex_tables_compile(cli_out, tmp_path):
    doc = tmp_path / "tables.tex"
    inputs = "".join(f"\\input{{{cli_out / t}.tex}}\n"
                     for t in TABLES + ["comparisons_all_pairs"])
    doc.write_text("\\documentclass[twocolumn]{article}\n\\usepackage{booktabs}\n"
                   "\\begin{document}\n" + inputs + "\\end{document}\n")
    proc = subprocess.run(["pdflatex", "-interaction=nonstopmode", "-halt-on-error",
                           doc.name], cwd=tmp_path, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stdout[-2000:]
    assert "Overfull \\hbox" not in proc.stdout        # every table fits its float


def test_experiment_analysis_yaml_is_found_from_the_runs(tmp_path):
    """Runs of +experiment=enronhop_rewards take baseline and SESOI from
    experiments/enronhop_rewards/analysis.yaml, and the report says so."""
    write_sweep(tmp_path, rewards=("naive", "shaped"), algos=("grpo",), seeds=(0, 1),
                n_questions=6, steps=(0,))
    for cfg in tmp_path.glob("*/.hydra/config.yaml"):
        cfg.write_text(cfg.read_text().replace("experiment: null",
                                               "experiment: enronhop_rewards"))
    out = tmp_path / "o"
    assert cli.main([str(tmp_path), "--out", str(out), "--no-figures"]) == 0
    s = json.loads((out / "summary.json").read_text())
    spec = "experiments/enronhop_rewards/analysis.yaml"     # wherever the checkout lives
    assert s["baseline_source"] == spec and s["baseline_label"] == "reward=shaped"
    assert s["sesoi"] == 0.03 and f"(from {spec})" in (out / "report.md").read_text()


def test_run_still_writing_is_read_up_to_its_last_full_line(tmp_path):
    write_sweep(tmp_path, rewards=("naive",), algos=("grpo", "dapo"), seeds=(0, 1),
                n_questions=5, steps=(0,))
    run = tmp_path / "reward=naive,algo=dapo,seed=1"
    (run / "COMPLETE").unlink()
    text = (run / "eval.jsonl").read_text()
    (run / "eval.jsonl").write_text(text + text.splitlines()[0][:30])   # half a line
    sw = collect([tmp_path], include_incomplete=True)
    assert any("still being written" in w for w in sw.warnings)
    s = analyse(sw, B=100, baseline={"algo": "grpo"}, with_curves=False)
    assert [c["n_seeds"] for c in s["cells"]] == [2, 2]
    (run / "COMPLETE").write_text("")          # a finished run must not be truncated
    with pytest.raises(AnalysisError, match=r"line 11 is not valid JSON"):
        collect([tmp_path])


def test_an_l_shaped_design_tests_each_cell_once(tmp_path):
    """Each factor varied alone from the baseline (2 x 2 without the far corner): a main
    effect would be one pair, the cell's own comparison; the family holds the 2 cells."""
    write_sweep(tmp_path, seeds=(0, 1, 2), n_questions=20, steps=(0, 3))
    for d in tmp_path.glob("reward=shaped,algo=dapo,seed=*"):
        shutil.rmtree(d)
    s = analyse(collect([tmp_path]), B=200, baseline={"reward": "naive", "algo": "grpo"})
    conf = [c for c in s["comparisons"] if c["family"] == "confirmatory"]
    assert sorted(c["kind"] for c in conf) == ["cell", "cell"]
    assert sorted(c["label"] for c in conf) == ["algo=dapo", "reward=shaped"]


def test_an_evaluation_only_sweep_draws_and_links_no_empty_curves(tmp_path):
    """One evaluation step and no optimizer steps (the warm start evaluated under
    harness settings): no learning-curve or training figure, and no link to one."""
    from analysis.publish import headline
    write_sweep(tmp_path / "sweep", seeds=(0, 1), n_questions=10, steps=(0,))
    s = analyse(collect([tmp_path / "sweep"]), B=200,
                baseline={"reward": "naive", "algo": "grpo"})
    (tmp_path / "fig").mkdir()
    (tmp_path / "fig" / "training.png").write_bytes(b"an earlier analysis's")
    drawn = figures.write_all(s, tmp_path / "fig", workers=1)
    assert drawn["learning_curves"] == {} and drawn["training"] == {}
    made = {p.name for p in (tmp_path / "fig").glob("*.png")}
    assert "forest.png" in made and not made & {"learning_curves.png", "training.png"}
    block = headline(s, "results/report")
    assert "learning_curves.png" not in block and "training.png" not in block


def test_a_sweep_at_a_floor_gives_no_planning_table():
    """Every score 0 (e.g. voyager_coderepair's repair rate): all variance components are
    0, an MDE of 0 would say nothing, and the report says so instead of a table."""
    from analysis.report import _planning
    zero = {"sigma2_seed": 0.0, "tau2": 0.0, "sigma2_resid": 0.0}
    lines = _planning({"planning": {"mde_table": {}}, "variance_components": zero}, True)
    assert "no planning table is given" in " ".join(lines)
    assert not any(line.startswith("| seeds per cell") for line in lines)


def test_a_behaviour_that_is_the_metric_is_not_repeated_beside_it(sweep_dir):
    """metric `answered`: answer_rate reads the same row field, so it is neither a
    behaviour nor a change column (it would be the metric twice); with metric correct it
    is both."""
    by_metric = {m: analyse(collect([sweep_dir]), metric=m, B=200, rng_seed=1,
                            baseline={"reward": "naive", "algo": "dapo"})
                 for m in ("answered", "correct")}
    for cell in by_metric["answered"]["cells"]:
        assert "answer_rate" not in cell["behaviour"]
        assert "answer_rate" not in (cell.get("change") or {}) and "answered" in cell["change"]
    for cell in by_metric["correct"]["cells"]:
        assert "answer_rate" in cell["behaviour"] and "answer_rate" in cell["change"]


def test_interval_words_follow_the_analysed_alpha(tmp_path):
    # a Pocock design analyses at 0.0294: its intervals are 97.06%, and no text calls
    # them 95% (only the MDE table's range from the components' uncertainty stays 95%)
    write_sweep(tmp_path, rewards=("naive", "shaped"), algos=("grpo",), seeds=(0, 1, 2),
                n_questions=20, steps=(0, 5))
    out = tmp_path / "o"
    assert cli.main([str(tmp_path), "--out", str(out), "--B", "100", "--no-figures",
                     "--baseline", "reward.name=shaped", "--alpha", "0.0294"]) == 0
    report = (out / "report.md").read_text()
    assert "97.06% CI" in report and "are 97.06% t intervals" in report
    assert "95% CI" not in report and "95% t" not in report
    assert "97.06\\% t interval" in (out / "results.tex").read_text()
    assert "the 94.12\\% interval lies within" in (out / "comparisons.tex").read_text()
    assert "95\\%" not in (out / "results.tex").read_text()


def test_keys_of_one_reward_choice_are_not_called_an_older_ablate(tmp_path):
    """The shaped reward's weights exist only in shaped runs: no "older ablate" warning;
    a key missing from fewer runs of the same reward than hold it still gets one, which
    counts only those runs (issue 50: a key fewer runs hold is a factor)."""
    from analysis.collect import config_warnings
    runs = [SimpleNamespace(seed=s, config_file=f"c{s}", config=c) for s, c in enumerate([
        {"seed": 0, "reward.name": "outcome"},
        {"seed": 1, "reward.name": "shaped", "reward.weights.witness": 0.1},
        {"seed": 2, "reward.name": "shaped", "reward.weights.witness": 0.1},
        {"seed": 3, "reward.name": "shaped", "reward.weights.witness": 0.1}])]
    assert not any("older ablate" in w for w in config_warnings(runs))
    runs[1].config.pop("reward.weights.witness")
    assert any(w.startswith("1 run(s) lack keys") and "reward.weights.witness" in w
               for w in config_warnings(runs))
