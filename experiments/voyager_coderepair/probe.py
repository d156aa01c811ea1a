"""Probe before the voyager_coderepair grid: what feeds the skill library on code repair?

    PYTHONPATH=. python experiments/voyager_coderepair/probe.py [--tasks 8] [--samples 2]

Two measurements, written to experiments/voyager_coderepair/probe.json:

1. model: agent=voyager's training act with the warm-started tiny code-repair model
   (model=tiny_coderepair, its masks on, the grid's 12 turns), on the first `--tasks`
   training repositories x `--samples`, from an empty library: episodes judged correct,
   candidate skills, skills verified into the library, retries.
2. baseline (labelled: NOT the policy): the scripted HonestFixer
   (ablate/envs/coderepair/baseline.py) on the same repositories, its episodes fed to the
   same verification; then, for `--heldout` held-out repositories, does the top-1
   retrieved skill verify there (transfer of a patch program to a new repository)?
"""
from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from types import SimpleNamespace

import torch

from ablate.agents.voyager import Voyager
from ablate.apps.cli import compose_config, normalise_overrides
from ablate.envs import make_env, run_episode
from ablate.envs.skills import verify
from ablate.harness.episode import scripted_episode
from ablate.loop.scoring import score
from ablate.models.loading import load_policy
from ablate.samplers import make_sampler

OUT = Path(__file__).with_name("probe.json")


def model_part(cfg, env, tasks, samples):
    model, tok = load_policy(cfg.model)
    sampler = make_sampler(cfg.sampler, model, tok, device="cpu", dtype=cfg.model.dtype,
                           seed=0)
    pol = SimpleNamespace(sampler=sampler, tokenizer=tok, env=env, cfg=cfg)
    agent = Voyager(top_k=2, max_retries=2)
    agent.training = True
    t0 = time.time()
    eps = agent.act(pol, tasks, samples, temperature=cfg.sampler.temperature, seed=0,
                    score=lambda e: score(e, env, cfg.reward))
    m = agent.step_metrics()
    return {"episodes": len(eps), "correct": sum(bool(e.correct) for e in eps),
            "submitted": sum(e.final_answer is not None for e in eps),
            "edits_per_episode": sum(e.env_metrics.get("edits", 0) for e in eps) / len(eps),
            "candidates": m["voyager/candidates"], "verified": m["voyager/skills_added"],
            "verify_failed": m["voyager/verify_failed"], "retries": m["voyager/retries"],
            "library_size": m["voyager/library_size"], "seconds": round(time.time() - t0, 1)}


def baseline_part(env, tasks, heldout):
    agent = Voyager()
    solved = 0
    for i, t in enumerate(tasks):
        traj = run_episode(env, t, env.baseline(t, 0), 40)
        ep = scripted_episode(traj, i, 0, env.behaviour(t, traj.results))
        solved += traj.correct
        agent.learn(env, ep)
    transfer, offered = 0, 0
    for t in heldout:
        top = agent.library.search(env.skill_query(t), 1)
        if top:
            offered += 1
            transfer += verify(env, t, top[0][0]).ok
    return {"label": "scripted HonestFixer, not the policy", "tasks": len(tasks),
            "solved": int(solved), "library_size": len(agent.library),
            "heldout": len(heldout), "heldout_offered_a_skill": offered,
            "heldout_top1_skill_verifies": int(transfer)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tasks", type=int, default=8)
    ap.add_argument("--samples", type=int, default=2)
    ap.add_argument("--heldout", type=int, default=32)
    args = ap.parse_args()
    torch.set_num_threads(1)
    cfg = compose_config(normalise_overrides([
        "env=coderepair", "model=tiny_coderepair", "env.max_turns=12", "learner=torch",
        "agent=voyager"]))
    env = make_env(cfg.env, cfg=cfg)
    train, test = env.tasks("train"), env.tasks("test")
    tasks = train[: args.tasks]
    out = {"command": "python experiments/voyager_coderepair/probe.py "
                      f"--tasks {args.tasks} --samples {args.samples} --heldout {args.heldout}",
           "model": model_part(cfg, env, tasks, args.samples),
           "baseline": baseline_part(env, train[: 4 * args.tasks],
                                     test[: args.heldout])}
    OUT.write_text(json.dumps(out, indent=2) + "\n")
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
