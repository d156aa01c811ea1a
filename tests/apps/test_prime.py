"""`python -m ablate.prime` (issue 47): a Prime Lab / prime-rl TOML file as an ablate cell.

Data (tests/data/prime, see its README): the seed article's file verbatim, prime-rl's
configs/acereason_math/stage1.toml (era A) and configs/basic/wiki-search/rl.toml (era C;
its era-B version too)."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from ablate.apps.cli import compose_config
from ablate.prime import cli as prime_cli
from ablate.prime.cli import as_args, prepare
from ablate.prime.resolve import hf_local
from ablate.prime.schema import FORMATS, detect
from ablate.prime.source import Source

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "tests" / "data" / "prime"
ARTICLE = DATA / "enronhop_env.toml"
ACEREASON = DATA / "acereason_math_stage1.toml"
WIKI = DATA / "wiki_search_rl.toml"
WIKI_B = DATA / "wiki_search_rl_era_b.toml"


def composed(path: Path, *overrides: str):
    """The config `python -m ablate.prime FILE overrides --cfg job` prints."""
    _, ours, rest, _ = prepare([str(path), *overrides, "--cfg", "job"])
    return compose_config(as_args(ours) + [a for a in rest if "=" in a])


def env(tmp_path: Path) -> dict:
    return dict(os.environ, WANDB_MODE="disabled", ABLATE_CACHE=str(tmp_path / "cache"),
                HF_HOME=str(tmp_path / "hf"), OMP_NUM_THREADS="1")


def prime(args, cwd: Path, timeout=300):
    return subprocess.run([sys.executable, "-m", "ablate.prime", *map(str, args)], cwd=cwd,
                          env=env(cwd), capture_output=True, text=True, timeout=timeout)


# ------------------------------------------------------------------ the article's file
def test_the_article_file_is_toml_1_1_and_lab_format():
    text = ARTICLE.read_text()
    assert "args = {\nmax_turns = 15," in text          # the multi-line inline table
    import tomllib
    with pytest.raises(tomllib.TOMLDecodeError):
        tomllib.loads(text)
    src = Source(ARTICLE)
    assert detect(src.data) == ("lab", "lab")
    assert src.lines["env[0].args.judge_model"] == 13
    assert src.lines["eval.interval"] == 22


def test_article_cfg_job():
    cfg = composed(ARTICLE)
    t = cfg.trainer
    assert (t.max_steps, t.group_size, t.tasks_per_step, t.max_async_level) == (300, 16, 16, 4)
    assert (cfg.eval.every, cfg.eval.num_tasks, cfg.eval.samples, cfg.eval.at_start) == \
        (100, 64, 1, True)
    assert cfg.env.name == "enronhop" and cfg.env.max_turns == 15
    assert cfg.model.name == "qwen3_4b" and cfg.model.hf_id == "Qwen/Qwen3-4B-Instruct-2507"
    assert (cfg.env.judge.name, cfg.env.judge.model) == ("llm", "gpt-5-nano")
    assert cfg.env.train_tasks_path == "hf://datasets/DeL-TaiseiOzaki/enronhop/train.jsonl"
    assert cfg.env.emails_path == "hf://datasets/miluki/enronhop-corpus/emails.jsonl"
    assert cfg.harness.max_new_tokens_per_turn == 4096
    assert cfg.learner.lora.enable and cfg.learner.lora.alpha == 16   # Hosted Training
    assert cfg.algo.rollout_correction == "token-mask" and cfg.trainer.lr == 1e-4
    assert not cfg.algo.dynamic_sampling.enable        # oversampling: async, so ignored
    assert cfg.run.wandb_project == "enronhop_env"


def test_article_cfg_job_through_the_cli(tmp_path):
    proc = prime([ARTICLE, "--cfg", "job"], tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    cfg = yaml.safe_load(proc.stdout)
    assert cfg["trainer"]["max_steps"] == 300 and cfg["env"]["judge"]["model"] == "gpt-5-nano"
    assert "infrastructure ignored" in proc.stderr and "run.devices_per_cell" in proc.stderr
    assert not (tmp_path / "outputs").exists()


def test_article_without_its_data_names_the_hf_file(tmp_path):
    proc = prime([ARTICLE], tmp_path)
    assert proc.returncode == 2
    errors = [ln for ln in proc.stderr.splitlines() if "error" in ln]
    assert len(errors) == 1 and "Traceback" not in proc.stderr
    assert errors[0].startswith(f"ablate.prime: error: {ARTICLE}:14: env[0].args.train_data_file")
    assert "hf://datasets/DeL-TaiseiOzaki/enronhop/train.jsonl" in errors[0]
    assert "env.train_tasks_path=" in errors[0]
    assert not (tmp_path / "outputs").exists()


def test_hf_files_come_from_the_local_cache(tmp_path, monkeypatch):
    snap = tmp_path / "hub" / "datasets--o--r" / "snapshots" / ("a" * 40)
    snap.mkdir(parents=True)
    (snap / "train.jsonl").write_text("{}\n")
    (tmp_path / "hub" / "datasets--o--r" / "refs").mkdir()
    (tmp_path / "hub" / "datasets--o--r" / "refs" / "main").write_text("a" * 40)
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_CACHE", str(tmp_path / "hub"))
    assert hf_local("hf://datasets/o/r/train.jsonl") == str(snap / "train.jsonl")
    assert hf_local("hf://datasets/o/r/test.jsonl") is None


@pytest.mark.slow   # a real cell (~13 s); the parsing tests stay in the default run
def test_article_runs_a_tiny_cell_to_complete(tmp_path):
    out = tmp_path / "cell"
    small = ["env=synthetic", "model=tiny", "learner=torch",
             "env.num_inboxes=6", "env.emails_per_inbox=40", "env.train_tasks=40",
             "env.test_tasks=16", "trainer.max_steps=1", "trainer.tasks_per_step=2",
             "trainer.group_size=2", "trainer.max_async_level=0", "eval.num_tasks=4",
             "eval.every=1", "eval.at_start=false", "eval.greedy=false",
             "harness.max_new_tokens_per_turn=96", "harness.max_tokens_per_episode=256",
             "env.max_turns=4", "run.num_trajectories=2", "run.num_threads=1",
             "run.quiet=true", f"hydra.run.dir={out}"]
    proc = prime([ARTICLE, *small], tmp_path, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert (out / "COMPLETE").exists()
    cfg = yaml.safe_load((out / "config.yaml").read_text())
    assert cfg["env"]["name"] == "synthetic" and cfg["model"]["name"] == "tiny"
    assert cfg["learner"]["lora"]["enable"] is True          # from the file, kept
    assert cfg["sampler"]["temperature"] == 1.0 and cfg["eval"]["samples"] == 1


# ------------------------------------------------------------------ prime-rl's eras
def test_prime_rl_era_a_acereason():
    assert detect(Source(ACEREASON).data) == ("prime-rl", "A")
    cfg = composed(ACEREASON, "env=synthetic")
    assert (cfg.trainer.max_steps, cfg.trainer.group_size, cfg.trainer.tasks_per_step) == \
        (500, 8, 128)
    assert cfg.sampler.temperature == 0.6 and cfg.eval.every == 50
    assert cfg.trainer.lr == 1e-6 and cfg.learner.weight_decay == 0.01   # prime-rl's
    assert cfg.learner.lora.enable is False                              # full FT
    assert cfg.model.hf_id == "deepseek-ai/DeepSeek-R1-Distill-Qwen-7B"
    assert cfg.harness.max_new_tokens_per_turn == 8192
    assert cfg.learner.checkpoint_every == 100 and cfg.run.wandb_project == "acereason-math"


@pytest.mark.parametrize("path,era", [(WIKI, "C"), (WIKI_B, "B")])
def test_prime_rl_wiki_search(path, era):
    assert detect(Source(path).data) == ("prime-rl", era)
    cfg = composed(path, "env=synthetic")
    assert (cfg.trainer.max_steps, cfg.trainer.group_size, cfg.trainer.tasks_per_step) == \
        (200, 16, 8)
    assert cfg.sampler.temperature == 1.0 and cfg.trainer.lr == 1e-5
    assert (cfg.eval.every, cfg.eval.at_start) == (0, False)   # no [orchestrator.eval]
    assert cfg.learner.lora.enable and cfg.learner.lora.rank == 8
    assert list(cfg.learner.lora.target_modules)[-1] == "down_proj"
    assert cfg.model.name == "qwen3_4b"
    assert cfg.harness.max_new_tokens_per_turn == 512
    assert cfg.harness.max_tokens_per_episode == 4096


def test_an_unknown_env_id_is_one_line(tmp_path, capsys):
    with pytest.raises(SystemExit) as exc:
        prime_cli.main([str(WIKI), "--cfg", "job"])
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert exc.value.code == 2
    assert err.startswith(f"ablate.prime: error: {WIKI}:47: "
                          "orchestrator.train.source[0].env.taskset.id: 'wiki-search'")
    assert "enronhop_env" in err and "env=NAME" in err


# ------------------------------------------------------------------ mistakes
def _broken(tmp_path: Path, old: str, new: str) -> Path:
    path = tmp_path / "broken.toml"
    text = ARTICLE.read_text()
    assert old in text
    path.write_text(text.replace(old, new, 1))
    return path


@pytest.mark.parametrize("old,new,expected", [
    ("max_async_level = 4", "max_async_level = 4\nwarmup = 3", ":7: warmup: unknown key"),
    ("rollouts_per_example = 16", "rollouts_per_exampel = 16",
     ":4: rollouts_per_exampel: unknown key (did you mean rollouts_per_example?)"),
    ("interval = 100", 'interval = "100"',
     ":22: eval.interval: expected an integer, got '100' (a string)"),
    ("batch_size = 256", "batch_size = 250",
     ":3: batch_size: 250 rollouts is not a multiple of rollouts_per_example = 16"),
    ("max_tokens = 4096", "max_tokns = 4096",
     ":8: sampling.max_tokns: unknown key (did you mean sampling.max_tokens?)"),
    ("max_turns = 15,", "max_turn = 15,",
     ":12: env[0].args.max_turn: unknown argument of the environment (did you mean "
     "max_turns?)"),
])
def test_a_mistake_is_one_line_exit_2_and_no_cell(tmp_path, monkeypatch, capsys, old, new,
                                                  expected):
    path = _broken(tmp_path, old, new)
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as exc:
        prime_cli.main([str(path), "hydra.run.dir=cell"])
    err = capsys.readouterr().err.strip().splitlines()
    assert exc.value.code == 2
    assert len(err) == 1 and err[0].startswith(f"ablate.prime: error: {path}{expected}")
    assert sorted(os.listdir(tmp_path)) == ["broken.toml"]


def test_a_mistake_through_the_real_cli_has_no_traceback(tmp_path):
    path = _broken(tmp_path, "max_steps = 300", "max_steps = 3.5")
    proc = prime([path], tmp_path)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert proc.stderr.strip().splitlines() == [
        f"ablate.prime: error: {path}:2: max_steps: expected an integer, got 3.5 (a number)"]
    assert sorted(os.listdir(tmp_path)) == ["broken.toml"]


# ------------------------------------------------------------------ --write, docs
def test_write_gives_an_experiment_that_composes(tmp_path):
    target = tmp_path / "experiment" / "enronhop_lab.yaml"
    proc = prime([ARTICLE, "--write", target], tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    exp = yaml.safe_load(target.read_text())
    assert exp["experiment"] == "enronhop_lab"
    assert {"override /env": "prime/enronhop_lab"} in exp["defaults"]   # the env's keys:
    env_option = yaml.safe_load((tmp_path / "env" / "prime" / "enronhop_lab.yaml").read_text())
    assert env_option["defaults"] == ["/env/enronhop@_here_", "_self_"]     # its own option
    assert exp["trainer"]["tasks_per_step"] == 16 and env_option["judge"]["model"] == "gpt-5-nano"
    run = subprocess.run([sys.executable, "-m", "ablate", "--config-dir", str(tmp_path),
                          "+experiment=enronhop_lab", "--cfg", "job"], cwd=tmp_path,
                         env=env(tmp_path), capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    cfg = yaml.safe_load(run.stdout)
    assert (cfg["trainer"]["max_steps"], cfg["eval"]["every"], cfg["model"]["name"]) == \
        (300, 100, "qwen3_4b")
    assert (cfg["env"]["name"], cfg["env"]["judge"]["model"]) == ("enronhop", "gpt-5-nano")


def test_docs_table_names_every_key():
    doc = (ROOT / "docs" / "prime.md").read_text()
    missing = [k for table in FORMATS.values() for k in table if f"`{k}`" not in doc]
    assert missing == []


def test_a_refused_key_and_a_verifiers_package(tmp_path, monkeypatch):
    from ablate.prime import resolve
    from ablate.prime.convert import convert
    from ablate.prime.source import PrimeError
    text = WIKI.read_text()
    refused = tmp_path / "tokens.toml"
    refused.write_text(text.replace("batch_size = 128", "token_batch_size = 65536"))
    with pytest.raises(PrimeError, match=r"tokens.toml:37: orchestrator.token_batch_size: "
                                         r"refused: .*give orchestrator.batch_size"):
        convert(str(refused))
    monkeypatch.setattr(resolve, "verifiers_package", lambda env_id: "wiki_search")
    keys = {o.key: o.value for o in convert(str(WIKI)).overrides}
    assert (keys["env"], keys["env.taskset"]) == ("verifiers", "wiki_search")
