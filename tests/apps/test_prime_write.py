"""`--write` then `+experiment=NAME` with overrides is the direct file's cell with the same
overrides (issue 64 item 11): a group given on the command line (`env=synthetic`,
`model=tiny`) replaces the file's choice of it and every key the file set inside it, as
after the file itself; so the docs' tiny recipe through the experiment composes and
passes preflight (no judge key the user never wrote)."""
from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from omegaconf import OmegaConf

from ablate.apps import cli
from ablate.apps.cli import compose_config
from ablate.prime import cli as prime_cli
from ablate.prime.cli import as_args, prepare

DATA = Path(__file__).resolve().parents[2] / "tests" / "data" / "prime"
ARTICLE = DATA / "enronhop_env.toml"
ACEREASON = DATA / "acereason_math_stage1.toml"      # a model that is no preset: ~model
# docs/prime.md's tiny recipe
TINY = ["env=synthetic", "model=tiny", "trainer.max_steps=1", "trainer.tasks_per_step=2",
        "trainer.group_size=2", "trainer.max_async_level=0",
        "harness.max_new_tokens_per_turn=96", "harness.max_tokens_per_episode=256",
        "env.max_turns=4", "eval.num_tasks=4", "eval.every=1"]


def direct(path: Path, *overrides: str) -> dict:
    """The cell `python -m ablate.prime FILE overrides` runs (its --cfg job)."""
    _, ours, rest, _ = prepare([str(path), *overrides, "--cfg", "job"])
    return _plain(compose_config(as_args(ours) + [a for a in rest if "=" in a]))


def via(root: Path, name: str, *overrides: str) -> dict:
    """The cell `python -m ablate --config-dir ROOT +experiment=NAME overrides` runs."""
    return _plain(compose_config([f"hydra.searchpath=[file://{root}]",
                                  f"+experiment={name}", *overrides]))


def _plain(cfg) -> dict:
    out = OmegaConf.to_container(cfg)
    out.pop("experiment")                 # the experiment's name: null on the direct path
    return out


def write(tmp_path, path: Path, name: str, *overrides: str) -> Path:
    prime_cli.main([str(path), *overrides, "--write",
                    str(tmp_path / "experiment" / f"{name}.yaml")])
    return tmp_path


@pytest.mark.parametrize("overrides", [[], ["env=synthetic"], ["env=synthetic", "model=tiny"],
                                       TINY, ["env.max_turns=3"]])
def test_the_written_experiment_overridden_is_the_direct_cell(tmp_path, overrides):
    root = write(tmp_path, ARTICLE, "lab")
    assert via(root, "lab", *overrides) == direct(ARTICLE, *overrides)
    exp = yaml.safe_load((root / "experiment" / "lab.yaml").read_text())
    assert "env" not in exp                                  # the env's keys: its option
    assert {"override /env": "prime/lab"} in exp["defaults"]


@pytest.mark.parametrize("overrides", [[], ["model=tiny"]])
def test_a_model_that_is_no_preset_is_replaced_whole(tmp_path, overrides):
    root = write(tmp_path, ACEREASON, "ace", "env=synthetic")
    assert via(root, "ace", *overrides) == direct(ACEREASON, "env=synthetic", *overrides)
    assert via(root, "ace")["model"]["hf_id"] == "deepseek-ai/DeepSeek-R1-Distill-Qwen-7B"
    assert via(root, "ace", "model=tiny")["model"]["hf_id"] != \
        "deepseek-ai/DeepSeek-R1-Distill-Qwen-7B"


def test_the_docs_tiny_recipe_through_the_experiment_passes_preflight(tmp_path, monkeypatch,
                                                                      capsys):
    monkeypatch.chdir(tmp_path)
    root = write(tmp_path, ARTICLE, "lab")
    code = cli.preflight([f"hydra.searchpath=[file://{root}]", "+experiment=lab", *TINY,
                          "run.num_threads=1", "run.quiet=true",
                          f"env.cache_dir={tmp_path / 'cache'}"])
    assert code == 0, capsys.readouterr().err


def test_group_keys_need_the_experiment_folder(tmp_path, capsys):
    with pytest.raises(SystemExit) as exc:
        prime_cli.main([str(ARTICLE), "--write", str(tmp_path / "lab.yaml")])
    err = capsys.readouterr().err.strip().splitlines()
    assert exc.value.code == 2 and err[-1].startswith("ablate.prime: error: --write: ")
    assert "experiment/lab.yaml" in err[-1] and not (tmp_path / "lab.yaml").exists()
