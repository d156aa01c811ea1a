"""Where one learner update of the default cell goes: a real batch, profiled.

    python benchmarks/profile_update.py [--batch FILE] [--learners deepspeed,torch]
                                        [--steps 3] [--top 25] [-- hydra overrides...]

Step 1 of the default cell (`python -m ablate`, plus overrides after `--`): its rollouts
by the untrained policy, the rewards, `algorithm.prepare`; the batch is pickled to
--batch (and read from there when the file exists, so every learner and every run sees
the same segments). Then, per learner, three learners built from the same weights update
in turn `--steps` times on that batch (VARIANTS: no shared prefix and the output head
over every position, the learner before issue 11; shared prefix and full head, the one
before ablate/learners/head.py; today's, head on trained positions only); the medians of
steps >= 2 give the ratios, and their losses must agree. Then the trained-only learner runs
one update under torch.profiler (top operators by self CPU time), and
`export_state_dict` (the weight push) is timed on its own."""
from __future__ import annotations

import argparse
import json
import pickle
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def capture(overrides: list[str], path: Path):
    """The default cell's step-1 batch: (segments, advantages, algorithm config)."""
    from ablate.algos import build_algorithm
    from ablate.loop.cell import ModelPolicy, derived_seed, sample_step_tasks, score
    from ablate.apps.cli import compose_config
    from ablate.envs import make_env

    cfg = compose_config(overrides + ["run.quiet=true"])
    torch.set_num_threads(int(cfg.run.num_threads))
    env = make_env(cfg.env, cfg=cfg)
    policy = ModelPolicy(env, cfg, Path(tempfile.mkdtemp()))
    t = cfg.trainer
    tasks = sample_step_tasks(env.tasks("train"), t.tasks_per_step, cfg.seed, 1, 0)
    eps = policy.act(tasks, t.group_size, temperature=cfg.sampler.temperature,
                     seed=derived_seed(cfg.seed, 1, 0))
    algorithm = build_algorithm(cfg.algo, max_len=cfg.harness.max_tokens_per_episode, cfg=cfg)
    rewards = algorithm.shape_rewards([r for r, _ in score(eps, env, cfg.reward)], eps)
    batch = algorithm.prepare(eps, rewards, [e.group for e in eps], policy.learner)
    path.write_bytes(pickle.dumps({"segments": batch.segments,
                                   "advantages": batch.advantages}))
    return cfg


def fresh_learner(cfg, name: str, shared_prefix: bool = True):
    from ablate.learners import build_model_for_learner, make_learner
    from ablate.models.loading import load_policy

    lcfg = cfg.learner.copy()
    lcfg.name, lcfg.shared_prefix = name, shared_prefix
    model = build_model_for_learner(lambda: load_policy(cfg.model)[0], lcfg)
    return make_learner(lcfg, model, lr=cfg.trainer.lr, seed=cfg.seed,
                        temperature=cfg.sampler.temperature, ckpt_dir=tempfile.mkdtemp())


def loss_for(cfg, batch):
    from ablate.algos import build_algorithm
    from ablate.algos.protocol import TrainingBatch
    algorithm = build_algorithm(cfg.algo, max_len=cfg.harness.max_tokens_per_episode, cfg=cfg)
    tb = TrainingBatch(batch["segments"], batch["advantages"], list(range(len(
        batch["segments"]))), [1] * len(batch["segments"]))
    return algorithm.loss_fn(tb)


def profiled(learner, batch, loss_fn, top: int) -> dict:
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        learner.update(batch["segments"], batch["advantages"], loss_fn)
    table = prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=top)
    return {"table": table}


# the learner before issue 11 (every segment forwards the prompt, full head), the one
# before ablate/learners/head.py (shared prefix, full head), and today's
VARIANTS = {"plain": (False, False), "full_head": (True, False), "trained_head": (True, True)}


def paired(cfg, name: str, batch, loss_fn, steps: int) -> dict:
    """One learner per variant, all from the same weights, updating in turn on the same
    batch: step times (median of steps >= 2, as ratios to trained_head) and losses."""
    pair = {}
    for v, (shared, only) in VARIANTS.items():
        pair[v] = fresh_learner(cfg, name, shared)
        pair[v].head_on_trained_only = only
    times, losses, m = {v: [] for v in pair}, {v: [] for v in pair}, {}
    for _ in range(steps):
        for v, lrn in pair.items():
            t0 = time.perf_counter()
            m[v] = lrn.update(batch["segments"], batch["advantages"], loss_fn)
            times[v].append(time.perf_counter() - t0)
            losses[v].append(m[v]["loss"])
    med = {v: statistics.median(t[1:] or t) for v, t in times.items()}
    t0 = time.perf_counter()
    pair["trained_head"].export_state_dict()
    return {"step_s": {v: [round(x, 3) for x in t] for v, t in times.items()},
            "ratio_to_trained_head": {v: round(med[v] / med["trained_head"], 3) for v in med},
            "loss_max_abs_diff": {v: max(abs(a - b) for a, b in zip(losses[v], losses[
                "trained_head"])) for v in pair},
            "forward_tokens": {v: m[v]["forward_tokens"] for v in m},
            "train_tokens": m["trained_head"]["train_tokens"],
            "micro_batches": {v: m[v]["micro_batches"] for v in m},
            "export_s": round(time.perf_counter() - t0, 3), "learner": pair["trained_head"]}


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch", default="/tmp/ablate_default_batch.pkl")
    ap.add_argument("--learners", default="deepspeed,torch")
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--top", type=int, default=25)
    ap.add_argument("--no-profile", action="store_true")
    ap.add_argument("overrides", nargs="*")
    a = ap.parse_args(argv)
    from ablate.apps.cli import compose_config
    path = Path(a.batch)
    cfg = compose_config(a.overrides + ["run.quiet=true"]) if path.exists() \
        else capture(a.overrides, path)
    torch.set_num_threads(int(cfg.run.num_threads))
    batch = pickle.loads(path.read_bytes())
    loss_fn = loss_for(cfg, batch)
    out = {"segments": len(batch["segments"]),
           "tokens": sum(len(s.ids) for s in batch["segments"])}
    for name in a.learners.split(","):
        res = paired(cfg, name, batch, loss_fn, a.steps)
        learner = res.pop("learner")
        if not a.no_profile:
            print(f"=== {name}\n" + profiled(learner, batch, loss_fn, a.top)["table"])
        out[name] = res
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
