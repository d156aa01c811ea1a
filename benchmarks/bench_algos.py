"""Update time of each algorithm preset relative to `grpo`, on the default cell, in one
process.

    python benchmarks/bench_algos.py [--repeats 3] [--presets grpo,dapo,...]

One batch of the default cell's first step is generated once (default config: tiny model,
4 tasks x 4 rollouts, DeepSpeed ZeRO-3 learner); then, round-robin over the presets so
that load from other processes hits all alike, each preset's `prepare` + `learner.update`
(what train_step does after the rollout) runs on that batch; the order rotates every
round. Rollouts are the same for every preset except DAPO's dynamic-sampling refills, so
the update is where presets differ. `grpo+token-tis` adds the rollout correction's extra
learner pass; `ppo` its critic's forward and optimiser step. Prints one
JSON line: median seconds and the ratio to grpo per preset, and GiGPO's anchor-state
coverage (fraction of turns sharing their state with another turn) on that batch."""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ablate.algos import build_algorithm  # noqa: E402
from ablate.loop.cell import ModelPolicy, derived_seed, sample_step_tasks, score  # noqa: E402
from ablate.apps.cli import compose_config, normalise_overrides  # noqa: E402
from ablate.envs.email.bundle import build_env  # noqa: E402
from ablate.envs.email.judge import make_judge  # noqa: E402

PRESETS = ("grpo", "dapo", "dr_grpo", "grpo_tcr", "rloo", "reinforce_pp", "gspo", "cispo",
           "gigpo", "ppo", "grpo+token-tis")


def preset_cfg(name: str):
    preset, _, correction = name.partition("+")
    extra = [f"algo.rollout_correction={correction}"] if correction else []
    return compose_config(normalise_overrides([f"+algo={preset}", *extra]))


def first_batch(cfg, policy, env, judge):
    t = cfg.trainer
    tasks = sample_step_tasks(env.tasks("train"), t.tasks_per_step, cfg.seed, 1, 0)
    episodes = policy.act(tasks, t.group_size, temperature=cfg.sampler.temperature,
                          seed=derived_seed(cfg.seed, 1, 0))
    return episodes, [r for r, _ in score(episodes, judge, cfg.reward)]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--presets", default=",".join(PRESETS))
    args = ap.parse_args()
    names = args.presets.split(",")
    cfg = compose_config([])
    env, judge = build_env(cfg), make_judge(cfg.env.judge)
    with tempfile.TemporaryDirectory() as d:
        policy = ModelPolicy(env, cfg, Path(d))
        episodes, scores = first_batch(cfg, policy, env, judge)
        groups = [e.group for e in episodes]
        algos = {n: build_algorithm(preset_cfg(n).algo, cfg=preset_cfg(n),
                                    max_len=cfg.harness.max_tokens_per_episode) for n in names}
        times: dict[str, list[float]] = {n: [] for n in names}
        for rep in range(args.repeats):
            for n in names[rep % len(names):] + names[: rep % len(names)]:   # rotate
                t0 = time.perf_counter()
                a = algos[n]
                rewards = a.shape_rewards(scores, episodes)
                batch = a.prepare(episodes, rewards, groups, policy.learner)
                policy.learner.update(batch.segments, batch.advantages, a.loss_fn(batch))
                times[n].append(time.perf_counter() - t0)
    base = statistics.median(times["grpo"]) if "grpo" in times else None
    gigpo = build_algorithm(preset_cfg("gigpo").algo, max_len=cfg.harness.max_tokens_per_episode)
    coverage = gigpo.prepare(episodes, gigpo.shape_rewards(scores, episodes), groups,
                             None).metrics["gigpo/anchor_coverage"]
    out = {"episodes": len(episodes), "repeats": args.repeats,
           "turns": sum(len(e.turns) for e in episodes), "gigpo_anchor_coverage": coverage,
           "segments": sum(len(e.segments) for e in episodes), "presets": {
               n: {"median_s": round(statistics.median(ts), 4),
                   "ratio_to_grpo": round(statistics.median(ts) / base, 3) if base else None}
               for n, ts in times.items()}}
    print(json.dumps(out))


if __name__ == "__main__":
    main()
