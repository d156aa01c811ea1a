"""A cell across ranks (docs/distributed.md): one ZeRO-3 update on two gloo ranks equals
the update on one rank over the same episodes (token-mean and seq-mean, LoRA on and off);
a two-rank torchrun cell writes one directory once, records its world size, dies as a
whole and resumes; the device list of parallel grid workers. The learner parity test
loads saved weights in both runs (zero.Init draws other initial weights than plain
construction: never rely on seeds)."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
import yaml

from ablate.apps.devices import devices_for_job
from ablate.core import dist
from ablate.loop.ranks import token_shard

ROOT = Path(__file__).resolve().parents[2]
DIST_KEYS = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
             "ABLATE_DIST_ENV_PID", "LOCAL_WORLD_SIZE", "GROUP_RANK", "ROLE_RANK",
             "TORCHELASTIC_RUN_ID")


def clean_env(**extra) -> dict:
    """This process's environment without any launcher's variables, our code first."""
    env = {k: v for k, v in os.environ.items() if k not in DIST_KEYS}
    env.update(PYTHONPATH=str(ROOT), WANDB_MODE="disabled", OMP_NUM_THREADS="1", **extra)
    return env


# --- pure functions ------------------------------------------------------------------------
def test_shard_covers_in_order():
    for n in range(0, 9):
        for w in (1, 2, 3, 4):
            parts = [dist.shard(n, r, w) for r in range(w)]
            assert [i for p in parts for i in p] == list(range(n))
            assert max(map(len, parts)) - min(map(len, parts)) <= 1


def test_token_shard_keeps_units_whole_and_balances():
    lengths = [10, 10, 50, 5, 5, 30, 30, 20]
    units = [0, 0, 1, 2, 2, 3, 4, 5]           # episode of each row
    parts = [token_shard(lengths, units, r, 2) for r in range(2)]
    assert sorted(parts[0] + parts[1]) == list(range(8))
    for u in set(units):                       # an episode's rows on one rank
        assert len({r for r in range(2) for i in parts[r] if units[i] == u}) == 1
    tok = [sum(lengths[i] for i in p) for p in parts]
    assert abs(tok[0] - tok[1]) <= 50          # balanced to within one unit
    assert token_shard(lengths, units, 0, 1) == list(range(8))


def test_devices_for_four_gpus_eight_parallel_cells():
    gpus = ["0", "1", "2", "3"]
    one = [devices_for_job(i, gpus, 1) for i in range(8)]
    assert one == [["0"], ["1"], ["2"], ["3"], ["0"], ["1"], ["2"], ["3"]]
    two = [devices_for_job(i, gpus, 2) for i in range(8)]
    assert two == [["0", "1"], ["2", "3"]] * 4
    for per in (1, 2):                          # any S concurrent jobs: disjoint devices
        slots = 4 // per
        for start in range(8 - slots + 1):
            used = [d for i in range(start, start + slots) for d in devices_for_job(i, gpus, per)]
            assert len(used) == len(set(used)) == slots * per
    assert devices_for_job(5, ["4", "6", "7"], 3) == ["4", "6", "7"]   # a given list
    with pytest.raises(ValueError, match="devices_per_cell=5 but this machine shows 4"):
        devices_for_job(0, gpus, 5)


def test_assign_sets_cuda_visible_devices(monkeypatch):
    from ablate.apps.devices import assign
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1,2,3")
    monkeypatch.delenv("ABLATE_GRID_DEVICES", raising=False)
    assert assign(3, 0) is None and os.environ["CUDA_VISIBLE_DEVICES"] == "0,1,2,3"
    assert assign(3, 2) == ["2", "3"] and os.environ["CUDA_VISIBLE_DEVICES"] == "2,3"
    assert assign(4, 2) == ["0", "1"]           # the machine's list, not the last job's


def test_a_worker_that_initialised_cuda_keeps_its_devices(monkeypatch):
    """joblib reuses worker processes: once CUDA has read CUDA_VISIBLE_DEVICES a change is
    ignored, so a later job of the same worker keeps (and reports) the first job's."""
    from ablate.apps import devices
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1,2,3")
    monkeypatch.delenv("ABLATE_GRID_DEVICES", raising=False)
    assert devices.assign(1, 1) == ["1"]
    monkeypatch.setattr(devices, "_cuda_initialized", lambda: True)
    assert devices.assign(2, 1) == ["1"] and os.environ["CUDA_VISIBLE_DEVICES"] == "1"


# --- one update: two ranks == one rank ---------------------------------------------------
WORKER = r'''
import json, os, sys, torch, transformers
sys.path[:0] = [{root!r}, {root!r} + "/tests/learners"]   # the shared test helpers
from ablate.core import dist
dist.init(120)
from test_learners import make_batch, lcfg
from ablate.algos.losses import policy_loss
from ablate.learners import make_learner
from ablate.loop.ranks import learner_rows

class Batch:   # the fields of a TrainingBatch that learner_rows reads
    def __init__(self, segs):
        self.segments, self.episode_of = segs, [i // 2 for i in range(len(segs))]

weights_dir, out = sys.argv[1:3]
torch.set_num_threads(1)
segs, adv = make_batch(lengths=(40, 64, 23, 57, 31, 12, 50, 9))
for agg in ("token-mean", "seq-mean-token-mean"):
    for lora in (False, True):
        def loss_fn(x, agg=agg):
            return policy_loss(x.logprobs, x.old_logprobs, x.advantages, x.mask,
                               eps_low=0.2, eps_high=0.28, agg=agg,
                               num_tokens=x.num_tokens, num_seqs=x.num_seqs)
        cfg = lcfg("deepspeed", micro_batch_tokens=64, lora=lora)
        model = transformers.AutoModelForCausalLM.from_pretrained(weights_dir)
        lrn = make_learner(cfg, model, lr=1e-2, seed=0, temperature=1.0,
                           ckpt_dir=out + "/ckpt")
        before = lrn._gathered_state_dict()
        stats = lrn.update(segs, adv, loss_fn, **learner_rows(Batch(segs), loss_fn))
        after = lrn._gathered_state_dict()
        if dist.rank() == 0:
            tag = f"{{agg}}_{{int(lora)}}"
            torch.save({{"before": before, "after": after}}, f"{{out}}/{{tag}}.pt")
            json.dump({{"world": lrn.world_size, "loss": stats["loss"],
                       "grad_norm": stats["grad_norm"],
                       "train_tokens": stats["train_tokens"], "tokens": stats["tokens"]}},
                      open(f"{{out}}/{{tag}}.json", "w"))
'''


@pytest.fixture(scope="module")
def saved_weights(tmp_path_factory):
    import transformers
    from test_learners import tiny_config
    torch.manual_seed(1234)
    d = tmp_path_factory.mktemp("tiny_qwen3")
    transformers.AutoModelForCausalLM.from_config(tiny_config()).save_pretrained(d)
    return str(d)


def test_two_ranks_update_equals_one_rank(saved_weights, tmp_path):
    """Same episodes, same weights: the 2-rank ZeRO-3 step (each rank its own rows, loss
    normalisers summed over ranks) leaves every parameter within 1e-5 of the 1-rank step,
    for token-mean and seq-mean-token-mean, full fine-tuning and LoRA."""
    script = tmp_path / "worker.py"
    script.write_text(WORKER.format(root=str(ROOT)))
    one, two = tmp_path / "one", tmp_path / "two"
    one.mkdir(), two.mkdir()
    procs = [subprocess.Popen([sys.executable, str(script), saved_weights, str(one)],
                              env=clean_env(), cwd=ROOT, stderr=subprocess.PIPE, text=True),
             subprocess.Popen([sys.executable, "-m", "torch.distributed.run", "--standalone",
                               "--nproc-per-node", "2", str(script), saved_weights, str(two)],
                              env=clean_env(), cwd=ROOT, stderr=subprocess.PIPE, text=True)]
    for p in procs:
        _, err = p.communicate(timeout=600)
        assert p.returncode == 0, err[-3000:]
    for agg in ("token-mean", "seq-mean-token-mean"):
        for lora in (0, 1):
            tag = f"{agg}_{lora}"
            s1, s2 = (json.loads((d / f"{tag}.json").read_text()) for d in (one, two))
            assert (s1["world"], s2["world"]) == (1, 2)
            assert s1["train_tokens"] == s2["train_tokens"] and s1["tokens"] == s2["tokens"]
            assert s2["loss"] == pytest.approx(s1["loss"], abs=1e-6)
            assert s2["grad_norm"] == pytest.approx(s1["grad_norm"], rel=1e-5)
            w1, w2 = (torch.load(d / f"{tag}.pt") for d in (one, two))
            assert w1["before"].keys() == w2["before"].keys()
            assert all(torch.equal(w1["before"][k], w2["before"][k]) for k in w1["before"])
            moved = max(float((w1["after"][k] - w1["before"][k]).abs().max())
                        for k in w1["after"])
            assert moved > 1e-3, tag                     # the step did something
            diff = max(float((w1["after"][k] - w2["after"][k]).abs().max())
                       for k in w1["after"])
            assert diff < 1e-5, (tag, diff)
            if lora:
                assert any("lora_" in k for k in w1["after"])


# --- a two-rank cell through torchrun ------------------------------------------------------
CELL = ["env.num_inboxes=4", "env.emails_per_inbox=30", "env.train_tasks=20",
        "env.test_tasks=8", "trainer.tasks_per_step=2", "trainer.group_size=2",
        "eval.num_tasks=3", "eval.every=1", "eval.samples=2", "eval.greedy=true",
        "harness.max_tokens_per_episode=96", "env.max_turns=2", "run.num_trajectories=2",
        "learner.checkpoint_every=1", "run.quiet=true"]


def torchrun_cell(out: Path, cache: Path, *extra: str, nproc: int = 2, **kw):
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone",
           "--nproc-per-node", str(nproc), "-m", "ablate", *CELL, *extra,
           f"hydra.run.dir={out}"]
    return subprocess.Popen(cmd, env=clean_env(ABLATE_CACHE=str(cache)), cwd=out.parent,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True, **kw)


def rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def check_two_rank_cell(out: Path, steps: int) -> None:
    assert (out / "COMPLETE").exists()
    cfg = yaml.safe_load((out / "config.yaml").read_text())
    assert cfg["run"]["world_size"] == 2
    metrics = rows(out / "metrics.jsonl")
    assert [r["step"] for r in metrics] == list(range(1, steps + 1))
    assert all(r["dist/world_size"] == 2 and r["episodes"] == 4 for r in metrics)
    ev = rows(out / "eval.jsonl")
    keys = [(r["step"], r["task_id"], r["sample"], r["decoding"]) for r in ev]
    assert len(keys) == len(set(keys))                      # no row twice
    tasks = sorted({r["task_id"] for r in ev})
    assert len(tasks) == 3                                  # both ranks' shares (2 + 1)
    for step in range(steps + 1):                           # every question, every sample
        got = sorted(k[1:] for k in keys if k[0] == step)
        assert got == sorted([(t, s, "sampled") for t in tasks for s in (0, 1)]
                             + [(t, 0, "greedy") for t in tasks])
    ds = out / "ckpt" / f"step_{steps:08d}" / "ds"
    assert sorted(p.name for p in ds.glob("*model_states.pt")) == [
        "zero_pp_rank_0_mp_rank_00_model_states.pt", "zero_pp_rank_1_mp_rank_00_model_states.pt"]


@pytest.mark.heavy
def test_two_rank_cell_completes_dies_as_one_and_resumes(tmp_path):
    """~3-5 min on 2 busy cores: a complete 2-step cell; a 3-step cell whose rank 1 is
    SIGKILLed after step 1's checkpoint ends as a whole within 2 minutes; the re-run resumes
    to COMPLETE; a 1-rank launch on that cell is a one-line refusal naming both sizes."""
    cache = tmp_path / "cache"
    out = tmp_path / "cell"
    p = torchrun_cell(out, cache, "trainer.max_steps=2")
    log, _ = p.communicate(timeout=900)
    assert p.returncode == 0, log[-4000:]
    check_two_rank_cell(out, 2)

    killed = tmp_path / "killed"
    p = torchrun_cell(killed, cache, "trainer.max_steps=3")
    ckpt = killed / "ckpt" / "step_00000001" / "COMPLETE"
    deadline = time.time() + 600
    while not ckpt.exists() and p.poll() is None and time.time() < deadline:
        time.sleep(0.5)
    assert ckpt.exists() and p.poll() is None
    victim = _rank_pid(p.pid, 1)
    os.kill(victim, signal.SIGKILL)
    t0 = time.time()
    p.communicate(timeout=120)                              # the whole launch ends
    assert time.time() - t0 < 120 and p.returncode != 0
    assert not (killed / "COMPLETE").exists()

    one = subprocess.run([sys.executable, "-m", "ablate", *CELL, "trainer.max_steps=3",
                          f"hydra.run.dir={killed}"], env=clean_env(ABLATE_CACHE=str(cache)),
                         cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert one.returncode == 2
    assert "was run with 2 rank(s)" in one.stderr and "this launch has 1" in one.stderr

    p = torchrun_cell(killed, cache, "trainer.max_steps=3")
    log, _ = p.communicate(timeout=900)
    assert p.returncode == 0, log[-4000:]
    assert "resumed from checkpoint" in (killed / "ablate.log").read_text()
    check_two_rank_cell(killed, 3)
    # the killed-and-resumed cell repeats the uninterrupted one's first two steps exactly
    for name in ("metrics.jsonl", "eval.jsonl"):
        a, b = (untimed(r for r in rows(d / name) if r["step"] <= 2) for d in (out, killed))
        assert a == b, name


def untimed(rs) -> list[dict]:
    return [{k: v for k, v in r.items() if not k.endswith(("_s", "seconds", "tokens_per_s"))}
            for r in rs]


def _rank_pid(launcher: int, rank: int) -> int:
    """The pid of the worker of `rank` under a torchrun launcher (its environment)."""
    for _ in range(100):
        for child in _descendants(launcher):
            try:
                env = Path(f"/proc/{child}/environ").read_bytes().split(b"\0")
            except OSError:
                continue
            if f"RANK={rank}".encode() in env and b"LOCAL_RANK=" + str(rank).encode() in env:
                return child
        time.sleep(0.2)
    raise AssertionError(f"no rank {rank} under process {launcher}")


def _descendants(pid: int) -> list[int]:
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        try:
            kids = Path(f"/proc/{p}/task/{p}/children").read_text().split()
        except OSError:
            kids = []
        out += [int(k) for k in kids]
        todo += [int(k) for k in kids]
    return out


def test_world_size_is_recorded_from_the_launcher(monkeypatch):
    """run.world_size must match the launcher's WORLD_SIZE (or be left at 1)."""
    from hydra import compose, initialize_config_dir
    from ablate.loop.config import ConfigError, register, validate
    register()
    with initialize_config_dir(str(ROOT / "conf"), version_base="1.3"):
        cfg = compose("config", overrides=["run.world_size=2"])
        cfg_torch = compose("config", overrides=["learner=torch"])
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    with pytest.raises(ConfigError, match="run.world_size=2 is not allowed; this launch has 1"):
        validate(cfg)
    monkeypatch.setenv("WORLD_SIZE", "2")
    validate(cfg)
    with pytest.raises(ConfigError, match=r"learner.name='torch' is not allowed; must be one "
                                          r"of \['deepspeed'\] with 2 ranks"):
        validate(cfg_torch)


def test_submitit_tasks_become_ranks(monkeypatch):
    """hydra/launcher=submitit_slurm with nodes=2, tasks_per_node=8: task 9 (node 1, local
    task 1) is rank 9 of 16, GPU 1 of its node, rendezvous at the first node."""
    from ablate.apps.devices import export_submitit_ranks
    # submitit exports RANK, MASTER_PORT, ... into os.environ itself: a private copy keeps
    # them from leaking into later tests (a leaked WORLD_SIZE hangs every ZeRO-3 init)
    monkeypatch.setattr(os, "environ", os.environ.copy())
    # an earlier test's in-process (world size 1) group would answer dist.rank() instead
    monkeypatch.setattr(dist, "_dist", lambda: None)
    for k in DIST_KEYS + ("LOCAL_WORLD_SIZE",):
        monkeypatch.delenv(k, raising=False)
    assert export_submitit_ranks() is False          # not a submitit job
    monkeypatch.setenv("SUBMITIT_EXECUTOR", "slurm")
    for k, v in dict(SLURM_JOB_ID="4242", SLURM_NTASKS="16", SLURM_PROCID="9",
                     SLURM_LOCALID="1", SLURM_JOB_NODELIST="gpu[003-004]",
                     SLURM_JOB_NUM_NODES="2", SLURM_NODEID="1").items():
        monkeypatch.setenv(k, v)
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    assert export_submitit_ranks() is True
    got = {k: os.environ[k] for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR")}
    assert got == {"RANK": "9", "WORLD_SIZE": "16", "LOCAL_RANK": "1", "MASTER_ADDR": "gpu003"}
    assert dist.rank() == 9 and dist.world_size() == 16 and not dist.is_writer()
    assert export_submitit_ranks() is False          # a launcher's variables are kept


def test_deepspeed_launchers_local_rank_argument_is_dropped():
    from ablate.apps.cli import launcher_args
    assert launcher_args(["--local_rank=1", "seed=3", "--local-rank=0"]) == ["seed=3"]


@pytest.mark.heavy
def test_deepspeed_launcher_runs_the_same_cell(tmp_path):
    """`deepspeed --num_gpus 2 --module ablate ...` (it appends --local_rank=N, dropped by
    the CLI): the same rank-aware cell as torchrun's (~2 min on 2 busy cores)."""
    out = tmp_path / "cell"
    cmd = [sys.executable, "-m", "deepspeed.launcher.runner", "--num_gpus", "2", "--module",
           "ablate", *CELL, "trainer.max_steps=1", f"hydra.run.dir={out}"]
    proc = subprocess.run(cmd, env=clean_env(ABLATE_CACHE=str(tmp_path / "cache")),
                          cwd=tmp_path, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    check_two_rank_cell(out, 1)
