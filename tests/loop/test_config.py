"""Config composition (in-process Hydra compose) and the CLI's up-front validation."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

from ablate.apps.cli import (align_sweep_keys, compose_config, expand_jobs, main,
                             normalise_overrides)
from ablate.loop.config import ConfigError, validate


def test_default_config_is_the_embedded_cell():
    cfg = compose_config([])
    validate(cfg)
    assert cfg.model.name == "tiny" and cfg.env.name == "synthetic"
    assert cfg.sampler.name == "hf" and cfg.learner.name == "deepspeed"
    assert cfg.reward.name == "shaped" and cfg.algo.name == "grpo"
    assert cfg.mode.name == "instruct" and cfg.mode.enable_thinking is False
    assert cfg.env.judge.name == "exact"


def test_design_card_syntax_and_plain_group_syntax_agree():
    card = compose_config(normalise_overrides(["+reward=naive", "+algo=dapo"]))
    plain = compose_config(normalise_overrides(["reward=naive", "algo=dapo"]))
    assert card == plain
    assert card.reward.name == "naive"
    assert (card.algo.eps_low, card.algo.eps_high) == (0.2, 0.28)
    assert card.algo.loss_agg == "token-mean"
    assert card.algo.overlong.enable and card.algo.dynamic_sampling.enable


@pytest.mark.parametrize("name,expect", [
    ("grpo", dict(eps_high=0.2, loss_agg="seq-mean-token-mean", norm_std=True)),
    ("dapo", dict(eps_high=0.28, loss_agg="token-mean", norm_std=True)),
    ("dr_grpo", dict(eps_high=0.2, loss_agg="seq-mean-token-sum-norm", norm_std=False)),
    ("grpo_tcr", dict(eps_high=0.315, loss_agg="token-mean", norm_std=True)),
])
def test_algo_presets(name, expect):
    cfg = compose_config([f"+algo={name}"])
    validate(cfg)
    for key, value in expect.items():
        assert cfg.algo[key] == value, key


def test_knobs_override_presets():
    cfg = compose_config(["+algo=dapo", "algo.eps_high=0.315", "algo.overlong.enable=false"])
    assert cfg.algo.eps_high == 0.315 and cfg.algo.overlong.enable is False


def test_plus_on_default_group_is_accepted():
    assert normalise_overrides(["+model=tiny", "+mode=thinking"]) == ["model=tiny",
                                                                     "mode=thinking"]
    cfg = compose_config(normalise_overrides(["+mode=thinking"]))
    assert cfg.mode.enable_thinking is True


def test_grid_expansion_counts_every_cell():
    jobs = expand_jobs(normalise_overrides(["+reward=naive,shaped,outcome", "+algo=grpo,dapo",
                                            "seed=0,1,2"]), multirun=True)
    assert len(jobs) == 18
    assert len({tuple(j) for j in jobs}) == 18


@pytest.mark.parametrize("wrong", ["0.0", "0.25"])
def test_a_command_line_value_replaces_the_presets_sweep_of_that_key(wrong):
    # experiments/collapse_rate's command: normalise_overrides writes `++reward.weights.
    # wrong=...`, which Hydra's sweeper would have run beside the preset's four values
    args = ["-m", "+experiment=penalty_dose", "env.gen_seed=4", "trainer.max_steps=16",
            f"reward.weights.wrong={wrong}", "seed=range(200,230)"]
    args = [a for a in align_sweep_keys(normalise_overrides(args)) if a != "-m"]
    _hydra_base_composes(args)
    jobs = expand_jobs(args, multirun=True)
    assert len(jobs) == 30 and len({tuple(j) for j in jobs}) == 30
    wrongs = {o for j in jobs for o in j if "reward.weights.wrong" in o}
    assert wrongs == {f"reward.weights.wrong={wrong}"}, wrongs
    assert {o for j in jobs for o in j if o.startswith("seed=")} == \
        {f"seed={s}" for s in range(200, 230)}
    # without a preset's sweep of the key, the `++` form stays (it may add a component)
    plain = align_sweep_keys(normalise_overrides(["-m", "reward.weights.wrong=0.5", "seed=0,1"]))
    assert "++reward.weights.wrong=0.5" in plain


def _hydra_base_composes(overrides):
    """What Hydra itself composes before it sweeps (run_mode MULTIRUN)."""
    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    from hydra.types import RunMode

    from ablate.apps.cli import conf_dir
    with initialize_config_dir(config_dir=str(conf_dir()), version_base="1.3"):
        GlobalHydra.instance().config_loader().load_configuration(
            "config", overrides, run_mode=RunMode.MULTIRUN)


# (overrides, text that the error must contain)
INVALID = [
    (["+reward=bogus"], "reward/bogus"),
    (["+algo=bogus"], "algo/bogus"),
    (["model=gpt9"], "model/gpt9"),
    (["sampler=sglang"], "sampler/sglang"),
    (["learner=fsdp"], "learner/fsdp"),
    (["mode=fast"], "mode/fast"),
    (["trainer.lr=abc"], "trainer.lr"),
    (["trainer.group_size=two"], "trainer.group_size"),
    (["trainer.nope=1"], "trainer.nope"),
    (["+trainer.nope=1"], "nope"),
    (["algo.eps_high=0.1"], "algo.eps_high"),
    (["+algo=dapo", "algo.overlong.cache_len=5000"], "algo.overlong.cache_len"),
    (["algo.overlong.max_len=-3"], "algo.overlong.max_len"),
    (["algo.loss_agg=seq-sum"], "algo.loss_agg"),
    (["algo.clip_c=0.5"], "algo.clip_c"),
    (["trainer.max_async_level=-1"], "trainer.max_async_level"),
    (["env=enronhop"], "env.emails_path"),
    (["env=enronhop", "env.emails_path=/nonexistent/e.jsonl", "env.train_tasks_path=/x",
      "env.test_tasks_path=/y"], "env.emails_path"),
    (["env.judge.name=llm"], "env.judge.base_url"),
    (["trainer.group_size=0"], "trainer.group_size"),
    (["env.max_results=50"], "env.max_results"),
    (["harness.on_malformed=explode"], "harness.on_malformed"),
    (["-m", "+reward=naive,nonsense"], "reward/nonsense"),
    (["-m", "algo.eps_high=0.3,0.1"], "algo.eps_high"),
]


@pytest.mark.parametrize("overrides,needle", INVALID, ids=[" ".join(o) for o, _ in INVALID])
def test_invalid_overrides_fail_before_work(overrides, needle, capsys):
    with pytest.raises(SystemExit) as exc:
        main(overrides)
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert needle in err, err
    assert "Traceback" not in err


def test_validate_rejects_in_code_too():
    cfg = compose_config([])
    cfg.algo.eps_high = 0.05
    with pytest.raises(ConfigError, match="algo.eps_high"):
        validate(cfg)


@pytest.mark.parametrize("args,needle", [
    (["+reward=bogus"], "reward/bogus"),
    (["algo.eps_high=0.1"], "algo.eps_high"),
])
def test_real_cli_reports_errors_without_traceback(args, needle, tmp_path):
    env = dict(os.environ, WANDB_MODE="disabled")
    proc = subprocess.run([sys.executable, "-m", "ablate", *args], capture_output=True,
                          text=True, cwd=tmp_path, env=env, timeout=120)
    assert proc.returncode != 0
    assert needle in proc.stderr
    assert "Traceback" not in proc.stderr + proc.stdout
    assert not (tmp_path / "outputs").exists()  # failed before any work


def test_cfg_job_prints_config(tmp_path):
    env = dict(os.environ, WANDB_MODE="disabled")
    proc = subprocess.run([sys.executable, "-m", "ablate", "+algo=dapo", "--cfg", "job"],
                          capture_output=True, text=True, cwd=tmp_path, env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "eps_high: 0.28" in proc.stdout


@pytest.mark.parametrize("launcher,target", [
    ("joblib", "hydra_plugins.hydra_joblib_launcher.joblib_launcher.JoblibLauncher"),
    ("submitit_slurm", "hydra_plugins.hydra_submitit_launcher.submitit_launcher.SlurmLauncher"),
    ("submitit_local", "hydra_plugins.hydra_submitit_launcher.submitit_launcher.LocalLauncher"),
])
def test_launchers_compose(launcher, target):
    """Local parallel cells (joblib) and SLURM (submitit): composed here, no cluster."""
    from hydra import compose, initialize_config_dir

    from ablate.apps.cli import conf_dir
    extra = {"joblib": ["hydra.launcher.n_jobs=2"],
             "submitit_slurm": ["hydra.launcher.partition=gpu", "hydra.launcher.gpus_per_node=8",
                                "hydra.launcher.timeout_min=2880"],
             "submitit_local": []}[launcher]
    with initialize_config_dir(config_dir=str(conf_dir()), version_base="1.3"):
        cfg = compose("config", overrides=[f"hydra/launcher={launcher}", *extra,
                                           "+experiment=enronhop_rewards"],
                      return_hydra_config=True)
    assert cfg.hydra.launcher._target_ == target
    if launcher == "joblib":
        assert cfg.hydra.launcher.n_jobs == 2
    if launcher == "submitit_slurm":
        assert cfg.hydra.launcher.partition == "gpu" and cfg.hydra.launcher.gpus_per_node == 8
    assert cfg.hydra.sweep.dir == "outputs/multirun/enronhop_rewards"


def test_experiments_compose_and_validate():
    """Every committed experiment's cells compose and validate (GPU ones included)."""
    from pathlib import Path
    root = Path(__file__).resolve().parents[2]
    names = sorted(p.stem for p in (root / "conf" / "experiment").glob("*.yaml"))
    assert {"enronhop_rewards", "enronhop_paper"} <= set(names)
    for name in names:
        assert (root / "experiments" / name / "README.md").is_file(), name
        extra = ([] if name != "enronhop_paper" else
                 ["env.emails_path=/d/e.jsonl", "env.train_tasks_path=/d/tr.jsonl",
                  "env.test_tasks_path=/d/te.jsonl"])
        jobs = expand_jobs([f"+experiment={name}", *extra], multirun=True)
        assert len(jobs) >= 4
        for job in jobs:
            validate(compose_config(job))
    paper = [compose_config(j) for j in expand_jobs(
        ["+experiment=enronhop_paper", "env.emails_path=/d/e.jsonl",
         "env.train_tasks_path=/d/tr.jsonl", "env.test_tasks_path=/d/te.jsonl"], True)]
    rows = {(c.model.name, c.reward.name, c.learner.lora.enable) for c in paper}
    assert rows == {("qwen3_4b", "naive", False), ("qwen3_4b", "shaped", False),
                    ("qwen3_4b", "shaped", True), ("qwen3_30b_a3b", "outcome", False)}
    assert all(c.trainer.tasks_per_step * c.trainer.group_size == 256 for c in paper)
    assert all(c.sampler.name == "vllm" and c.env.name == "enronhop" for c in paper)


def test_cell_dirname_stays_within_file_system_limits():
    from ablate.loop.config import MAX_DIRNAME, cell_dirname
    short = "+algo=dapo,seed=1"
    assert cell_dirname(short) == short
    long_a = ",".join(f"env.key{i}={i}" for i in range(40)) + ",seed=0"
    long_b = long_a[:-1] + "1"
    a, b = cell_dirname(long_a), cell_dirname(long_b)
    assert len(a.encode()) <= MAX_DIRNAME and len(b.encode()) <= MAX_DIRNAME
    assert a != b and a == cell_dirname(long_a)   # distinct and stable across re-runs


def test_configuration_reference_is_up_to_date():
    from ablate.apps.config_reference import OUT, generate
    assert OUT.read_text(encoding="utf-8") == generate(), \
        "docs/configuration.md is stale: run python -m ablate.apps.config_reference"
    text = generate()
    from ablate.loop.config import AblateConfig
    import dataclasses
    for f in dataclasses.fields(AblateConfig.__dataclass_fields__["trainer"].default_factory()):
        assert f"`trainer.{f.name}`" in text
    assert "| `trainer.max_steps` | int | `10` | `6` |" in text   # schema vs default cell
    assert "`sampler.name` | str | `hf` | same |" in text and "`vllm`" in text


AXES = ("env.name", "reward.name", "algo.adv_estimator", "algo.policy_loss", "agent.name",
        "harness.parser", "sampler.name", "learner.name")


@pytest.mark.parametrize("key", AXES)
def test_every_axis_is_one_registry_with_a_one_line_error(key):
    from ablate.core.registry import Registry
    from ablate.loop.config import ALLOWED
    reg = ALLOWED[key]
    assert isinstance(reg, Registry) and reg.key == key and reg.builtin()
    assert all(reg.docs[n] for n in reg.builtin())
    with pytest.raises(ConfigError, match=rf"^{key}='nope' is not one of \[.+\]$"):
        validate(compose_config([f"{key}=nope"]))
    with pytest.raises(ConfigError, match=rf"^{key}='nope' is not one of "):
        reg.get_checked("nope")


def test_plugins_register_names_on_any_axis():
    cfg = compose_config(["plugins=[registry_user_plugin]", "harness.parser=strict_copy",
                          "sampler=hf_copy", "learner=torch_copy"])
    validate(cfg)
    assert cfg.learner.name == "torch_copy" and "zero_stage" not in cfg.learner
    # renaming the backend inside another's keys: one line naming the option to use
    with pytest.raises(ConfigError, match=r"^learner.name='torch_copy' does not take "
                                          r"learner.ds_overrides, learner.zero_stage: select "
                                          r"the backend with learner=torch_copy"):
        validate(compose_config(["plugins=[registry_user_plugin]",
                                 "learner.name=torch_copy"]))
    from ablate.harness.parser import parse_actions
    assert parse_actions('<tool_call>{"name": "a", "arguments": {}}</tool_call>',
                         "strict_copy")[0].call.name == "a"
    with pytest.raises(ConfigError, match=r"^plugins: cannot import 'no_such_module_xyz'"):
        validate(compose_config(["plugins=[no_such_module_xyz]"]))


def test_a_cell_stored_under_renamed_keys_resumes_under_the_new_names():
    """config.yaml of a cell started before the judge moved to env.judge (and the
    curriculum's start_hops became start_level) shows no change; a real one is named."""
    import yaml
    from omegaconf import OmegaConf

    from ablate.loop.resume import config_changes
    cfg = compose_config([])
    stored = yaml.safe_load(OmegaConf.to_yaml(cfg, resolve=True))
    stored["judge"] = stored["env"].pop("judge")
    stored["algo"]["curriculum"]["start_hops"] = stored["algo"]["curriculum"].pop("start_level")
    assert config_changes(stored, cfg) == {}
    stored["judge"]["name"] = "llm"
    assert config_changes(stored, cfg) == {"env.judge.name": ("llm", "exact")}


def test_a_cell_stored_with_the_flat_backend_schema_resumes_under_its_backends_keys():
    """A config.yaml written when every sampler and learner key sat on one flat schema
    (an hf cell holding sampler.urls=[], a torch cell holding learner.zero_stage=3)
    resumes without the keys its backend never read; a used key that changed is named,
    and another backend's key away from its default is a change."""
    import yaml
    from omegaconf import OmegaConf

    from ablate.loop.resume import config_changes
    cfg = compose_config(["learner=torch"])
    stored = yaml.safe_load(OmegaConf.to_yaml(cfg, resolve=True))
    stored["sampler"].update(urls=[], num_servers=1, tensor_parallel_size=1, weight_sync="file",
                             gpu_memory_utilization=0.5, sleep_during_update=True,
                             max_model_len=None, server_args=[])
    stored["learner"].update(zero_stage=3, ds_overrides={})
    assert config_changes(stored, cfg) == {}
    stored["sampler"]["temperature"] = 0.7
    stored["sampler"]["num_servers"] = 2
    assert config_changes(stored, cfg) == {"sampler.num_servers": (2, None),
                                           "sampler.temperature": (0.7, 1.0)}
