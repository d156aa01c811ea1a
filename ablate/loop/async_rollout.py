"""Asynchronous rollouts (`trainer.max_async_level=k`, k > 0): a producer process samples
the batches of the coming steps while the learner trains, at most k policy versions
behind it (the pipelining of AReaL, Fu et al., 2025, arXiv:2505.24298 §4, and prime-rl's
max_async_level, with a fixed rather than a free-running lag).

Version v is the policy after v optimizer steps. The batch of step s is rolled out by
the producer from exactly version behaviour_version(s) = max(start, s - 1 - k) and trained
by the learner at version s - 1: its staleness is s - 1 - behaviour_version(s) <= k. The
tasks and sampling seeds of step s are those of the synchronous loop (ablate.loop.cell), so
k > 0 draws the same questions as k = 0; only the weights that answer them are older.
Weights travel learner -> producer serialized over a queue (a LoRA cell's adapter alone,
which the producer's HF sampler holds unmerged over its base, `load_adapter`; else the
whole state, LoRA merged), episodes producer -> learner as pickled Episode dataclasses;
scoring stays with the learner.

Resume: the pipeline restarts from the checkpoint (`start`), so the first k + 1 batches
after a resume come from the checkpointed weights (staleness below k). A resumed async run
is therefore a valid run but not row-for-row the uninterrupted one (k = 0 is)."""
from __future__ import annotations

import io
import json
import logging
import os
import pickle
import queue
import time
import traceback

import torch
from omegaconf import OmegaConf

from ablate.core.adapter import LoraAdapter
from ablate.core.seeding import derived_seed
from ablate.loop.scoring import sample_step_tasks
from ablate.loop.policy import SamplerPolicy
from ablate.envs import make_env, split_tasks

log = logging.getLogger("ablate.async")
POLL_S = 1.0          # how often a blocked side checks that the other one is alive


def behaviour_version(step: int, start: int, k: int) -> int:
    """The policy version that rolls out the batch of `step` (steps start at start + 1)."""
    return max(start, step - 1 - k)


def producer_weights(policy):
    """What the producer receives of the learner's weights: a LoRA cell's adapter alone
    where its sampler loads adapters (ModelPolicy.adapters), else the merged state."""
    if getattr(policy, "adapters", False):
        return policy.learner.export_adapter()
    return policy.learner.export_state_dict()


def tensor_bytes(weights) -> int:
    """The tensor bytes of a state dict or a LoraAdapter (a push's `push/bytes`)."""
    if isinstance(weights, LoraAdapter):
        return weights.nbytes
    return sum(t.numel() * t.element_size() for t in weights.values())


def dumps(weights) -> bytes:
    """A state dict, or a LoraAdapter as {"adapter_config": JSON text, "adapter": tensors}
    (plain containers: `loads` reads them with weights_only=True)."""
    buf = io.BytesIO()
    if isinstance(weights, LoraAdapter):
        torch.save({"adapter_config": json.dumps(weights.config),
                    "adapter": {k: v.detach().cpu() for k, v in weights.tensors.items()}}, buf)
    else:
        torch.save({k: v.detach().cpu() for k, v in weights.items()}, buf)
    return buf.getvalue()


def loads(blob: bytes):
    """`dumps`'s state dict or LoraAdapter."""
    got = torch.load(io.BytesIO(blob), map_location="cpu", weights_only=True)
    if isinstance(got.get("adapter_config"), str):
        return LoraAdapter(json.loads(got["adapter_config"]), got["adapter"])
    return got


def load_into(sampler, weights) -> None:
    """An adapter by `load_adapter`, a state dict by `load_weights`."""
    if isinstance(weights, LoraAdapter):
        sampler.load_adapter(weights)
    else:
        sampler.load_weights(weights)


class AsyncRollouts:
    """The learner's handle on the producer process: push(version, weights), take(step)."""

    def __init__(self, cfg, start: int, max_steps: int, weights):
        import multiprocessing as mp
        ctx = mp.get_context("spawn")       # a fresh interpreter: no forked torch threads
        self.k, self.start = int(cfg.trainer.max_async_level), start
        self.weights_q, self.out_q = ctx.Queue(), ctx.Queue()
        plain = OmegaConf.to_container(cfg, resolve=True)
        self.proc = ctx.Process(target=produce, name="ablate-rollout-producer", daemon=True,
                                args=(plain, start, max_steps, self.weights_q, self.out_q,
                                      os.getpid()))
        self.proc.start()
        log.info("rollout producer pid %d (max_async_level=%d)", self.proc.pid, self.k)
        self.push(start, weights)

    def push(self, version: int, weights) -> int:
        """`weights` (a state dict or a LoraAdapter: producer_weights) of `version` to the
        producer; their tensor bytes."""
        self.weights_q.put((version, dumps(weights)))
        return tensor_bytes(weights)

    def wanted(self, version: int, max_steps: int) -> bool:
        """Whether any step still to be rolled out uses weights of `version`."""
        return version <= max_steps - 1 - self.k

    def take(self, step: int, tasks: list) -> tuple[list, dict]:
        """The episodes of `step` and their staleness metrics (blocks until ready)."""
        kind, *payload = self._get()
        if kind == "error":
            raise RuntimeError(f"the rollout producer failed:\n{payload[0]}")
        got, version, episodes, seconds, cpu_seconds = payload
        if got != step or [t.id for t in tasks] != _task_ids(episodes):
            raise RuntimeError(f"rollout producer out of step: wanted step {step} "
                               f"(tasks {[t.id for t in tasks]}), got step {got}")
        return episodes, {"async/staleness": step - 1 - version,
                          "async/behaviour_version": version,
                          "async/producer_rollout_s": seconds,
                          "async/producer_cpu_s": cpu_seconds}

    def _get(self):
        while True:
            try:
                return self.out_q.get(timeout=POLL_S)
            except queue.Empty:
                if not self.proc.is_alive():
                    raise RuntimeError(f"the rollout producer exited (code "
                                       f"{self.proc.exitcode}) without a batch") from None

    def close(self) -> None:
        if self.proc.is_alive():
            self.proc.terminate()
        self.proc.join(timeout=10)


def _task_ids(episodes) -> list:
    ids = {}
    for e in episodes:
        ids.setdefault(e.group, e.task.id)
    return [ids[g] for g in sorted(ids)]


def produce(plain_cfg: dict, start: int, max_steps: int, weights_q, out_q,
            parent: int) -> None:
    """The producer process: for each step, wait for its behaviour version's weights,
    roll out the step's tasks with the synchronous loop's seeds, send the episodes."""
    try:
        torch.set_num_threads(1)            # its own core; the learner keeps the other
        cfg = OmegaConf.create(plain_cfg)
        policy, env = _sampler_policy(cfg)
        t, k, have = cfg.trainer, int(cfg.trainer.max_async_level), -1
        for step in range(start + 1, max_steps + 1):
            need = behaviour_version(step, start, k)
            while have < need:               # versions arrive in order, one per step
                have, blob = _next_weights(weights_q, parent)
                if have == need:
                    load_into(policy.sampler, loads(blob))
            ts, tc = time.time(), time.process_time()
            tasks = sample_step_tasks(split_tasks(env, "train"), t.tasks_per_step, cfg.seed, step, 0)
            episodes = policy.act(tasks, t.group_size, temperature=cfg.sampler.temperature,
                                  seed=derived_seed(cfg.seed, step, 0))
            pickle.dumps(episodes)   # a Queue drops what it cannot pickle: fail loudly here
            out_q.put(("batch", step, need, episodes, time.time() - ts,
                       time.process_time() - tc))
    except BaseException:                    # noqa: BLE001 - reported to the learner
        out_q.put(("error", traceback.format_exc()))


def _next_weights(weights_q, parent: int):
    while True:
        try:
            return weights_q.get(timeout=POLL_S)
        except queue.Empty:
            if os.getppid() != parent:       # the learner died (e.g. SIGKILL): stop too
                os._exit(0)


def _sampler_policy(cfg):
    """The environment and a sampler-only ModelPolicy (no learner) in this process."""

    env = make_env(cfg.env, cfg=cfg)   # as run_cell builds it
    return SamplerPolicy(env, cfg), env
