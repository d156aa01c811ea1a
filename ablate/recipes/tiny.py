"""Recipes of the embedded tiny policy (ablate.models.tiny loads it):

    python -m ablate.recipes.tiny build [--out DIR] [--steps N] [--minutes M] [--seed S]
        rebuilds the checkpoint from scratch (deterministic for a given --steps/--seed on
        the same torch build); --minutes stops early with a resumable checkpoint.
    python -m ablate.recipes.tiny warmstart --env coderepair [--out DIR]
        SFT of that checkpoint on another environment's scripted agent (the shipped
        ablate/models/assets/tiny_coderepair; ablate.recipes.tiny_warmstart).
    python -m ablate.recipes.tiny eval [--path DIR] [--tasks N] [--temperature T]
        [--masking none|ids|answers]: per-hop accuracy on the default env's held-out tasks.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from ablate.models.tiny import ASSET_DIR, load_tiny


# ----------------------------------------------------------------------------- eval
def quick_eval(model, tok, tasks, db, *, temperature: float = 0.0, masking: str = "none",
               max_turns: int = 10, seed: int = 0, mode_cfg=None, harness_cfg=None,
               batch: int = 32, judge=None) -> dict:
    """Held-out evaluation with the framework's own pieces: the rollout engine
    (ablate.harness.rollout), the HF sampler, the real ToolBox and the ExactJudge.
    masking: "none" | "ids" (action masking: tool names + message ids from context) |
    "answers" (also answer masking: answer = a 1-3-word span of an email read).
    Returns {"by_hop": {h: acc}, "n_by_hop", "acc", "answered", "episodes"}."""
    from dataclasses import replace
    from ablate.envs.email import EmailEnv
    from ablate.envs.email.judge import ExactJudge
    from ablate.harness.config import HarnessConfig, ModeConfig
    from ablate.harness.rollout import rollout
    from ablate.samplers.hf import HFSampler
    mode_cfg = mode_cfg or ModeConfig()
    harness_cfg = harness_cfg or HarnessConfig()
    harness_cfg = replace(harness_cfg, action_masking=masking in ("ids", "answers"),
                          answer_masking=masking == "answers")
    judge = judge or ExactJudge()
    sampler = HFSampler(model, tok)
    episodes = []
    for b0 in range(0, len(tasks), batch):
        eps = rollout(tasks[b0:b0 + batch], group_size=1, sampler=sampler, tokenizer=tok,
                      env=EmailEnv.over_db(db),
                      harness_cfg=harness_cfg, mode_cfg=mode_cfg, max_turns=max_turns,
                      temperature=temperature, seed=seed * 100_003 + b0)
        for e in eps:
            e.correct = judge.judge(e.task.question, e.task.answer, e.final_answer)
        episodes += eps
    by_hop: dict[int, list[bool]] = {}
    for e in episodes:
        by_hop.setdefault(e.task.hops, []).append(bool(e.correct))
    return {"by_hop": {h: sum(v) / len(v) for h, v in sorted(by_hop.items())},
            "n_by_hop": {h: len(v) for h, v in sorted(by_hop.items())},
            "acc": sum(bool(e.correct) for e in episodes) / max(1, len(episodes)),
            "answered": sum(e.answered for e in episodes) / max(1, len(episodes)),
            "episodes": episodes}


def default_env(cache_dir=None, **overrides):
    """The default synthetic env (EmailEnvConfig defaults): (db, train_tasks, test_tasks)."""
    from ablate.envs.email.config import EmailEnvConfig
    from ablate.envs.email.data import read_tasks
    from ablate.envs.email.db import EmailDB
    from ablate.envs.email import synthetic
    import hashlib
    import os
    cfg = EmailEnvConfig(**overrides)
    root = Path(cache_dir or os.path.expanduser("~/.cache/ablate")) / "tiny-eval"
    key = hashlib.sha256(json.dumps([cfg.gen_seed, cfg.num_inboxes, cfg.emails_per_inbox,
                                     cfg.train_tasks, cfg.test_tasks, cfg.max_hops,
                                     synthetic.GENERATOR_VERSION]).encode()).hexdigest()[:12]
    d = root / key
    if not (d / "DONE").exists():
        synthetic.generate(d, seed=cfg.gen_seed, num_inboxes=cfg.num_inboxes,
                           emails_per_inbox=cfg.emails_per_inbox, train_tasks=cfg.train_tasks,
                           test_tasks=cfg.test_tasks, max_hops=cfg.max_hops)
        (d / "DONE").write_text("")
    db = EmailDB.build(d / "emails.jsonl", d / "db.sqlite")
    return db, read_tasks(d / "train_tasks.jsonl"), read_tasks(d / "test_tasks.jsonl")


def balanced(tasks, n: int, seed: int = 0):
    """Up to n tasks, equal numbers per hop count, fixed order (shared across runs)."""
    by: dict[int, list] = {}
    for t in tasks:
        by.setdefault(t.hops, []).append(t)
    per = max(1, n // max(1, len(by)))
    out = []
    for h in sorted(by):
        out += by[h][:per]
    return out


# ----------------------------------------------------------------------------- CLI
def main(argv=None) -> None:
    ap = argparse.ArgumentParser(prog="python -m ablate.recipes.tiny")
    sub = ap.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("build", help="rebuild the tiny warm start from scratch")
    b.add_argument("--out", default=str(ASSET_DIR))
    b.add_argument("--work", default=None, help="scratch dir (worlds, checkpoints)")
    b.add_argument("--steps", type=int, default=None)
    b.add_argument("--minutes", type=float, default=None,
                   help="stop after this much training (resumable checkpoint)")
    b.add_argument("--seed", type=int, default=0)
    b.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE",
                   help="override BuildConfig fields")
    w = sub.add_parser("warmstart", help="SFT of the shipped checkpoint on another "
                       "environment's scripted agent (ablate/recipes/tiny_warmstart.py)")
    w.add_argument("--env", default="coderepair", help="an environment with a baseline")
    w.add_argument("--out", default=None, help="default: the shipped asset of --env")
    for field in ("demos", "epochs", "batch", "lr", "seed"):
        w.add_argument(f"--{field}", type=float if field == "lr" else int, default=None)
    e = sub.add_parser("eval", help="per-hop accuracy on held-out tasks")
    e.add_argument("--path", default=None)
    e.add_argument("--tasks", type=int, default=100)
    e.add_argument("--temperature", type=float, default=0.0)
    e.add_argument("--masking", choices=["none", "ids", "answers"], default="none")
    e.add_argument("--max-hops", type=int, default=2)
    a = ap.parse_args(argv)
    if a.cmd == "build":
        from ablate.recipes.tiny_train import BuildConfig, build
        cfg = BuildConfig(seed=a.seed)
        if a.steps is not None:
            cfg.steps = a.steps
        for kv in a.set:
            k, v = kv.split("=", 1)
            if not hasattr(cfg, k):
                sys.exit(f"unknown BuildConfig field {k!r}")
            setattr(cfg, k, type(getattr(cfg, k))(v))
        build(a.out, cfg, work_dir=a.work, minutes=a.minutes)
    elif a.cmd == "warmstart":
        from ablate.recipes.tiny_warmstart import Recipe, build as warmstart
        given = {k: getattr(a, k) for k in ("demos", "epochs", "batch", "lr", "seed")
                 if getattr(a, k) is not None}
        warmstart(Recipe(env=a.env, **given), a.out)
    else:
        from types import SimpleNamespace
        model, tok = load_tiny(SimpleNamespace(path=a.path, dtype="float32"))
        db, _, test = default_env(max_hops=a.max_hops)
        t0 = time.time()
        res = quick_eval(model, tok, balanced(test, a.tasks), db, temperature=a.temperature,
                         masking=a.masking)
        print(json.dumps({"by_hop": res["by_hop"], "n_by_hop": res["n_by_hop"],
                          "acc": res["acc"], "answered": res["answered"],
                          "seconds": round(time.time() - t0, 1)}))


if __name__ == "__main__":
    main()
