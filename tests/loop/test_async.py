"""Asynchronous rollouts (trainer.max_async_level, ablate.loop.async_rollout): k=0 is the
synchronous loop; k>0 trains on batches at most k versions stale, rolled out by exactly
the scheduled weights; the decoupled-PPO correction is applied to a stale batch as
published (AReaL); a SIGKILL mid-run resumes."""
from __future__ import annotations

import copy
import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from ablate.loop import async_rollout
from ablate.algos import build_algorithm
from ablate.loop.async_rollout import behaviour_version, dumps, produce
from ablate.core.seeding import derived_seed
from ablate.loop.cell import run_cell
from ablate.loop.policy import SamplerPolicy
from ablate.loop.scoring import sample_step_tasks
from ablate.protocol.environment import split_tasks
from ablate.apps.cli import compose_config, normalise_overrides
from ablate.loop.config import ConfigError, validate
from ablate.harness.episode import Segment
from ablate.learners import make_learner
from ablate.learners.base import LossInputs
from ablate.learners.batching import collate
from ablate.models.loading import load_policy

HERE = Path(__file__).resolve().parents[1]
TINY = ["env.num_inboxes=4", "env.emails_per_inbox=30", "env.train_tasks=20",
        "env.test_tasks=8", "trainer.tasks_per_step=1", "trainer.group_size=2",
        "eval.num_tasks=2", "eval.every=0", "eval.at_start=false",
        "harness.max_tokens_per_episode=96", "env.max_turns=2", "run.num_trajectories=2",
        "learner=torch", "run.quiet=true"]
ASYNC = ["algo.rollout_correction=decoupled-ppo"]
TIMING = ("rollout_s", "update_s", "step_s", "cpu_s", "seconds", "tokens_per_s")


def cell_rows(tmp_path, monkeypatch, overrides, name="cell"):
    monkeypatch.setenv("ABLATE_CACHE", str(tmp_path / "cache"))
    cfg = compose_config(normalise_overrides([*TINY, *overrides]))
    run_cell(cfg, tmp_path / name)
    return [json.loads(x) for x in (tmp_path / name / "metrics.jsonl").read_text().splitlines()]


def untimed(rows):
    return [{k: v for k, v in r.items() if not k.endswith(TIMING)} for r in rows]


def test_staleness_schedule_never_exceeds_k():
    for k in range(4):
        for start in (0, 3):
            got = [s - 1 - behaviour_version(s, start, k) for s in range(start + 1, start + 9)]
            assert got == [min(k, s - 1 - start) for s in range(start + 1, start + 9)]


@pytest.mark.parametrize("overrides,needle", [
    (["trainer.max_async_level=-1"], "trainer.max_async_level=-1"),
    (["trainer.max_async_level=1"], "algo.rollout_correction=decoupled-ppo"),
    (["trainer.max_async_level=1", *ASYNC, "+algo=dapo"], "algo.dynamic_sampling.enable"),
    (["trainer.max_async_level=1", *ASYNC, "sampler=vllm"], "sampler=hf"),
])
def test_async_preflight_errors_name_the_key(overrides, needle):
    cfg = compose_config(normalise_overrides(overrides))
    with pytest.raises(ConfigError, match="trainer.max_async_level") as exc:
        validate(cfg)
    assert needle in str(exc.value)


def test_k0_is_the_synchronous_loop(tmp_path, monkeypatch):
    sync = cell_rows(tmp_path, monkeypatch, ["trainer.max_steps=2"], "sync")

    def no_producer(*a, **kw):
        raise AssertionError("k=0 must not start a producer")
    monkeypatch.setattr(async_rollout, "AsyncRollouts", no_producer)
    k0 = cell_rows(tmp_path, monkeypatch, ["trainer.max_steps=2", "trainer.max_async_level=0"],
                   "k0")
    assert untimed(k0) == untimed(sync)
    assert [r["async/staleness"] for r in k0] == [0, 0]


@pytest.mark.parametrize("k", [1, 2])
def test_async_cell_staleness_is_at_most_k(k, tmp_path, monkeypatch):
    rows = cell_rows(tmp_path, monkeypatch, ["trainer.max_steps=4",
                                             f"trainer.max_async_level={k}", *ASYNC])
    assert [r["step"] for r in rows] == [1, 2, 3, 4]
    stale = [r["async/staleness"] for r in rows]
    assert max(stale) <= k and stale == [min(k, s - 1) for s in range(1, 5)]
    assert [r["async/behaviour_version"] for r in rows] == [max(0, s - 1 - k)
                                                            for s in range(1, 5)]
    for r in rows:   # the correction ran on every trained batch
        assert r.get("update/skipped") or "rollout_correction/ratio_mean" in r
    assert (tmp_path / "cell" / "COMPLETE").exists()


def test_the_producer_queue_carries_an_adapter_or_a_state():
    """dumps/loads: a LoraAdapter crosses as itself (config and tensors; weights_only
    loading), a state dict as a dict; load_into picks load_adapter or load_weights."""
    from ablate.core.adapter import LoraAdapter
    from ablate.loop.async_rollout import load_into, loads, tensor_bytes
    a = LoraAdapter({"r": 4, "target_modules": ["q_proj"]},
                    {"base_model.model.q.lora_A.weight": torch.arange(8.).view(2, 4)})
    got = loads(dumps(a))
    assert isinstance(got, LoraAdapter) and got.config == a.config
    assert torch.equal(got.tensors["base_model.model.q.lora_A.weight"],
                       a.tensors["base_model.model.q.lora_A.weight"])
    state = {"w": torch.ones(3)}
    assert torch.equal(loads(dumps(state))["w"], state["w"])
    assert tensor_bytes(a) == 32 and tensor_bytes(state) == 12
    calls = []
    sampler = SimpleNamespace(load_adapter=lambda x: calls.append("adapter"),
                              load_weights=lambda x: calls.append("weights"))
    load_into(sampler, got)
    load_into(sampler, state)
    assert calls == ["adapter", "weights"]


@pytest.mark.slow
def test_async_lora_cell_sends_the_producer_the_adapter_alone(tmp_path, monkeypatch):
    """A LoRA cell with k=1 and 3 steps (step 3 is rolled out by version 1, the one push
    to the producer after the start): that push is the adapter's bytes
    (async/push_bytes), which the producer's HF sampler holds unmerged; the rows equal
    those of the merged route (ADAPTER_SYNC=False: what the producer received before)
    up to float rounding, whose push was the whole state."""
    from test_adapter_sync import adapter_bytes
    from ablate.loop import policy as policy_module
    over = ["trainer.max_steps=3", "trainer.group_size=4", "trainer.tasks_per_step=2",
            "trainer.max_async_level=1", *ASYNC, "learner.lora.enable=true",
            "learner.lora.rank=4"]
    rows = cell_rows(tmp_path, monkeypatch, over, "adapter")
    monkeypatch.setattr(policy_module, "ADAPTER_SYNC", False)
    merged = cell_rows(tmp_path, monkeypatch, over, "merged")
    assert rows[0]["update/grad_norm"] > 0 and rows[2]["async/behaviour_version"] == 1
    sent = [r.get("async/push_bytes") for r in rows]
    assert sent == [float(adapter_bytes(tmp_path / "adapter")), None, None]
    assert merged[0]["async/push_bytes"] > 50 * sent[0]       # the whole (merged) state
    pushes = ("push/bytes", "async/push_bytes", "async/push_s")   # and its wall time
    for a, b in zip(untimed(rows), untimed(merged)):
        assert set(a) == set(b)
        for k in set(a) - set(pushes):
            assert a[k] == (pytest.approx(b[k], rel=1e-9, abs=1e-9)
                            if isinstance(b[k], float) else b[k]), k


def perturbed(state: dict, scale: float, seed: int) -> dict:
    g = torch.Generator().manual_seed(seed)
    return {k: v + scale * v.float().std().nan_to_num() * torch.randn(v.shape, generator=g)
            if v.is_floating_point() and v.numel() > 1 else v for k, v in state.items()}


def test_producer_rolls_out_exactly_the_scheduled_version(tmp_path, monkeypatch):
    """k=1 from start 0: steps 1, 2 from version 0, step 3 from version 1; the episodes
    equal an in-process rollout with those weights and the loop's tasks and seeds."""
    monkeypatch.setenv("ABLATE_CACHE", str(tmp_path / "cache"))
    cfg = compose_config(normalise_overrides([*TINY, "trainer.max_async_level=1", *ASYNC]))
    from ablate.envs import make_env
    env = make_env(cfg.env, cfg=cfg)   # as run_cell and the producer
    local = SamplerPolicy(env, cfg)
    w0 = {k: v.clone() for k, v in local.sampler.model.state_dict().items()}
    w1 = perturbed(w0, 0.05, 1)
    weights_q, out_q = queue.Queue(), queue.Queue()
    threads = torch.get_num_threads()
    worker = threading.Thread(target=produce, args=(
        __import__("omegaconf").OmegaConf.to_container(cfg, resolve=True), 0, 3,
        weights_q, out_q, os.getppid()))
    worker.start()
    weights_q.put((0, dumps(w0)))
    weights_q.put((1, dumps(w1)))
    worker.join(timeout=300)
    torch.set_num_threads(threads)
    batches = [out_q.get_nowait() for _ in range(3)]
    assert [(b[0], b[1], b[2]) for b in batches] == [("batch", 1, 0), ("batch", 2, 0),
                                                      ("batch", 3, 1)]

    def logprobs(weights, step):
        local.sampler.load_weights(weights)
        tasks = sample_step_tasks(split_tasks(env, "train"), 1, cfg.seed, step, 0)
        eps = local.act(tasks, 2, temperature=cfg.sampler.temperature,
                        seed=derived_seed(cfg.seed, step, 0))
        return [x for e in eps for s in e.segments for x in s.logprobs]

    got = [x for e in batches[2][3] for s in e.segments for x in s.logprobs]
    assert got == pytest.approx(logprobs(w1, 3), abs=1e-5)
    assert got != pytest.approx(logprobs(w0, 3), abs=1e-5)


def test_decoupled_ppo_weights_a_hand_built_stale_batch(tmp_path):
    """The loss of the pg algorithm with rollout_correction=decoupled-ppo on a batch whose
    behaviour logprobs come from stale weights equals a plain re-implementation of AReaL's
    decoupled PPO: -w_t min(r_t A, clip(r_t, 1-ε, 1+ε) A), r_t = π_θ/π_prox,
    w_t = π_prox/π_behav (0 above the cap), token mean per episode, mean over episodes."""
    cfg = compose_config(normalise_overrides(["learner=torch", *ASYNC,
                                              "algo.correction_cap=1.05"]))
    model, tok = load_policy(cfg.model)
    stale = copy.deepcopy(model)
    stale.load_state_dict(perturbed(model.state_dict(), 0.05, 7))
    kw = dict(lr=1e-4, seed=0, temperature=1.0, ckpt_dir=tmp_path / "ck")
    learner = make_learner(cfg.learner, model, **kw)
    behav = make_learner(cfg.learner, stale, **kw)
    texts = ["search the inbox for the meeting", "read email 42 and answer the question",
             "the final answer is Houston", "who sent the invoice on Monday"]
    ids = [tok(t)["input_ids"] for t in texts]
    segs = [Segment(ids=i, mask=[0, 0] + [1] * (len(i) - 2), logprobs=[0.0] * len(i))
            for i in ids]
    for s, lp in zip(segs, behav.logprobs(segs)):
        s.logprobs = [float(x) for x in lp]
    episodes = [SimpleNamespace(segments=[s], turns=[], response_tokens=1) for s in segs]
    algo = build_algorithm(cfg.algo, max_len=64)
    batch = algo.prepare(episodes, torch.tensor([1.0, 0.0, 0.0, 1.0]), [0, 0, 1, 1], learner)

    mb = collate(batch.segments, list(range(len(segs))))
    prox = batch.rows(batch.old_logprobs, mb.index, mb.old_logprobs).double()
    behav_lp = mb.old_logprobs.double()
    g = torch.Generator().manual_seed(3)
    cur = prox + 0.3 * torch.randn(prox.shape, generator=g, dtype=torch.float64) * mb.mask
    adv = batch.advantages[mb.index].double()
    n_tok, n_seq = int(mb.mask.sum()), int((mb.mask.sum(1) > 0).sum())
    x = LossInputs(cur, behav_lp, adv, mb.mask, torch.zeros_like(cur), None, n_tok, n_seq,
                   index=mb.index)
    loss, _ = algo.loss_fn(batch)(x)

    cap, eps = 1.05, 0.2
    per_episode, weights = [], []
    for r in range(len(segs)):
        terms = []
        for t in range(mb.mask.shape[1]):
            if mb.mask[r, t] == 0:
                continue
            w = float(torch.exp(prox[r, t] - behav_lp[r, t]))
            w = w if w <= cap else 0.0
            ratio = float(torch.exp(cur[r, t] - prox[r, t]))
            a = float(adv[r])
            terms.append(-w * min(ratio * a, min(max(ratio, 1 - eps), 1 + eps) * a))
            weights.append(w)
        per_episode.append(sum(terms) / len(terms))
    expected = sum(per_episode) / len(per_episode)
    assert float(loss) == pytest.approx(expected, abs=1e-9)
    assert 0.0 in weights and any(0 < w != pytest.approx(1.0, abs=1e-4) for w in weights)
    assert batch.metrics["rollout_correction/clipped_frac"] > 0


def run_cli(args, cwd: Path, cache: Path, kill=None):
    env = dict(os.environ, WANDB_MODE="disabled", ABLATE_CACHE=str(cache))
    head = ([str(HERE / "helpers" / "kill_at.py"), kill[0], str(kill[1])] if kill
            else ["-m", "ablate"])
    return subprocess.run([sys.executable, *head, *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=600)


def gone(pid: int, wait_s: float = 15.0) -> bool:
    """The process exited (or is a zombie waiting to be reaped)."""
    end = time.time() + wait_s
    while time.time() < end:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0]
        except (FileNotFoundError, ProcessLookupError):
            return True
        if state in ("Z", "X"):
            return True
        time.sleep(0.5)
    return False


@pytest.mark.slow
def test_sigkill_mid_async_run_resumes(tmp_path):
    """Killed after step 2's update, before its row and checkpoint (k=1): the rerun resumes
    from the step-1 checkpoint and restarts the pipeline there, so step 2 is rolled out by
    version 1 (staleness 0) and step 3 by version 1 again (staleness 1)."""
    args = [*TINY, "trainer.max_steps=3", "trainer.max_async_level=1", *ASYNC,
            "learner.checkpoint_every=1", f"hydra.run.dir={tmp_path / 'cell'}"]
    killed = run_cli(args, tmp_path, tmp_path / "cache", kill=("step", 2))
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-3000:]
    logged = killed.stdout + killed.stderr
    pid = int(logged.split("rollout producer pid ")[1].split()[0])
    assert gone(pid), "the producer outlived its killed learner"
    resumed = run_cli(args, tmp_path, tmp_path / "cache")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "resumed from checkpoint at step 1" in resumed.stdout + resumed.stderr
    rows = [json.loads(x) for x in (tmp_path / "cell" / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2, 3]
    assert [r["async/staleness"] for r in rows] == [0, 0, 1]
    assert (tmp_path / "cell" / "COMPLETE").exists()
