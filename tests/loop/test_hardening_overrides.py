"""Bad overrides fail in preflight: exit code 2, one line naming the key and the bad
value or what is allowed, no traceback, no cell directory, no COMPLETE."""
from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from ablate.apps.cli import flags_first, main, one_line

SMALL_ENV = ["env.num_inboxes=3", "env.emails_per_inbox=20", "env.train_tasks=6",
             "env.test_tasks=4"]

# (overrides, text the one-line error must contain); {FILE} is a regular file
BAD = [
    (["+reward=bogus"], "reward/bogus"),
    (["+algo=bogus"], "algo/bogus"),
    (["model=gpt9"], "model/gpt9"),
    (["sampler=sglang"], "sampler/sglang"),
    (["learner=fsdp"], "learner/fsdp"),
    (["mode=fast"], "mode/fast"),
    (["env=nope"], "env/nope"),
    (["judge=gpt"], "judge=gpt: the answer judge is the email world's own key now: "
                    "env.judge.name=exact|llm"),
    (["seed=abc"], "seed"),
    (["trainer.lr=abc"], "trainer.lr"),
    (["trainer.group_size=two"], "trainer.group_size"),
    (["trainer.nope=1"], "trainer.nope"),
    (["+trainer.nope=1"], "trainer.nope"),
    (["trainer.lr=0"], "trainer.lr=0.0"),
    (["trainer.group_size=1"], "trainer.group_size=1"),
    (["trainer.group_size=0"], "trainer.group_size=0"),
    (["trainer.tasks_per_step=0"], "trainer.tasks_per_step=0"),
    (["trainer.max_steps=-1"], "trainer.max_steps=-1"),
    (["trainer.max_async_level=-1"], "trainer.max_async_level=-1"),
    (["eval.every=-1"], "eval.every=-1"),
    (["eval.num_tasks=0"], "eval.num_tasks=0"),
    (["eval.samples=0"], "eval.samples=0"),
    (["learner.micro_batch_tokens=0"], "learner.micro_batch_tokens=0"),
    (["learner.checkpoint_every=-1"], "learner.checkpoint_every=-1"),
    (["learner.keep_checkpoints=0"], "learner.keep_checkpoints=0"),
    (["learner.zero_stage=5"], "learner.zero_stage=5"),
    (["learner.dtype=float16"], "learner.dtype='float16'"),
    (["learner.betas=[0.9,1.5]"], "learner.betas"),
    (["learner.grad_clip=-1"], "learner.grad_clip=-1"),
    (["learner.lora.enable=true", "learner.lora.rank=0"], "learner.lora.rank=0"),
    (["model.dtype=float8"], "model.dtype='float8'"),
    (["model=qwen3_4b", "model.hf_id=ablate-tests/no-such-model"], "not found locally"),
    (["model.path=/nonexistent/tiny"], "model.path='/nonexistent/tiny'"),
    (["sampler.temperature=0"], "sampler.temperature=0"),
    (["sampler.temperature=-1"], "sampler.temperature=-1"),
    (["sampler.top_p=0"], "sampler.top_p=0"),
    (["sampler.eval_temperature=-0.5"], "sampler.eval_temperature=-0.5"),
    (["env.judge.timeout_s=0"], "env.judge.timeout_s=0"),
    (["env.judge.max_retries=-1"], "env.judge.max_retries=-1"),
    (["env.judge.name=llm"], "env.judge.base_url"),
    (["env.judge.name=gpt"], "env.judge.name='gpt' is not allowed; choose one of exact, llm"),
    (["judge.timeout_s=5"], "judge.timeout_s=5: the answer judge is the email world's own key"),
    (["env.judge.name=llm", "env.judge.base_url=http://127.0.0.1:9", "env.judge.model=m",
      "env.judge.cache_dir={FILE}/judge"], "env.judge.cache_dir"),
    (["harness.max_new_tokens_per_turn=0"], "harness.max_new_tokens_per_turn=0"),
    (["harness.max_tokens_per_episode=0"], "harness.max_tokens_per_episode=0"),
    (["harness.max_tokens_per_episode=100000"], "context of 4096 tokens"),
    (["harness.on_malformed=explode"], "harness.on_malformed='explode'"),
    (["harness.action_masking=false"], "harness.answer_masking=true needs"),
    (["harness.masked_keyword_words=3"], "harness.masked_keyword_words=3"),
    (["harness.max_malformed=-1"], "harness.max_malformed=-1"),
    (["mode=thinking", "mode.max_think_tokens=0"], "mode.max_think_tokens=0"),
    (["env.max_turns=0"], "env.max_turns=0"),
    (["env.max_results=50"], "env.max_results=50"),
    (["env.num_inboxes=0"], "env.num_inboxes=0"),
    (["env.max_hops=7"], "env.max_hops=7"),
    (["env=enronhop"], "env.emails_path"),
    (["env=enronhop", "env.emails_path=/nonexistent/e.jsonl", "env.train_tasks_path=/x",
      "env.test_tasks_path=/y"], "env.emails_path='/nonexistent/e.jsonl': file not found"),
    (["env.cache_dir={FILE}/cache"], "env.cache_dir"),
    (["hydra.run.dir={FILE}/cell"], "hydra.run.dir"),
    (["-m", "seed=0,1", "hydra.sweep.dir={FILE}/sweep"], "hydra.sweep.dir"),
    (["run.device=tpu"], "run.device='tpu'"),
    (["run.wandb_mode=maybe"], "run.wandb_mode='maybe'"),
    (["run.num_threads=-2"], "run.num_threads='-2'"),
    (["run.num_threads=many"], "must be auto or an integer"),
    (["algo.eps_high=0.1"], "algo.eps_high"),
    (["algo.clip_c=0.5"], "algo.clip_c"),
    (["-m", "+reward=naive,nonsense"], "reward/nonsense"),
    (["-m", "algo.eps_high=0.3,0.1"], "algo.eps_high"),
    (["trainer.max_steps=1", "-m", "seed=0,1", "trainer.lr=-1"], "trainer.lr=-1"),
    (["--multirn"], "unknown option '--multirn'"),
    (["trainer.lr=[1,2"], "trainer.lr=[1,2"),
]
if importlib.util.find_spec("vllm") is None:
    BAD.append((["sampler=vllm"], "'vllm', which is not installed"))
if not torch.cuda.is_available():
    BAD.append((["run.device=cuda"], "run.device='cuda': no CUDA device"))


def expand(args: list[str], tmp: Path) -> list[str]:
    blocker = tmp / "a_file"
    blocker.write_text("not a directory")
    args = [a.replace("{FILE}", str(blocker)) for a in args]
    extra = [f"env.cache_dir={tmp / 'cache'}"] if not any(
        a.startswith("env.cache_dir") for a in args) else []
    dirs = [f"hydra.run.dir={tmp / 'cell'}", f"hydra.sweep.dir={tmp / 'sweep'}"]
    dirs = [d for d in dirs if not any(a.startswith(d.split("=")[0]) for a in args)]
    return SMALL_ENV + extra + dirs + args


def test_enough_cases():
    assert len(BAD) >= 40


@pytest.mark.parametrize("args,needle", BAD, ids=[" ".join(a) for a, _ in BAD])
def test_bad_override_fails_in_preflight(args, needle, tmp_path, capsys):
    with pytest.raises(SystemExit) as exc:
        main(expand(args, tmp_path))
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("ablate: error: ") and err.count("\n") == 1, err
    assert needle in err, err
    assert "Traceback" not in err
    assert not (tmp_path / "cell").exists() and not (tmp_path / "sweep").exists()
    assert not list(tmp_path.rglob("COMPLETE"))


def run_cli(args, cwd, timeout=300):
    env = dict(os.environ, WANDB_MODE="disabled", ABLATE_CACHE=str(cwd / "cache"))
    return subprocess.run([sys.executable, "-m", "ablate", *args], capture_output=True,
                          text=True, cwd=cwd, env=env, timeout=timeout)


@pytest.mark.parametrize("args,needle", [
    (["model=gpt9"], "Available options in 'model': qwen3_30b_a3b"),
    (["trainer.nope=1"], "Key 'nope' not in 'TrainerConfig'"),
    (["hydra.run.dir={FILE}/cell"], "is a file, not a directory"),
])
def test_real_cli_prints_one_line_and_no_traceback(args, needle, tmp_path):
    proc = run_cli(expand(args, tmp_path), tmp_path)
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1 and needle in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr + proc.stdout
    assert not (tmp_path / "outputs").exists() and not (tmp_path / "cell").exists()


def test_multirun_flag_may_stand_anywhere(tmp_path):
    assert flags_first(["a=1", "-m", "b=2", "--cfg", "job", "c=3"]) == [
        "-m", "--cfg", "job", "a=1", "b=2", "c=3"]
    sweep = tmp_path / "sweep"
    proc = run_cli([*SMALL_ENV, "model=scripted", "eval.num_tasks=2", "trainer.max_steps=0",
                    "-m", "seed=0,1", f"hydra.sweep.dir={sweep}", "run.quiet=true"], tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert len(list(sweep.rglob("COMPLETE"))) == 2


def test_one_line_flattens_hydra_option_lists():
    exc = ValueError("In 'config': Could not find 'model/x'\n\nAvailable options in 'model':"
                     "\n\ttiny\n\tscripted\nConfig search path:\n\tprovider=hydra, path=p\n")
    assert one_line(exc) == ("In 'config': Could not find 'model/x'; Available options in "
                             "'model': tiny, scripted")
