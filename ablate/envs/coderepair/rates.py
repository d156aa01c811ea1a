"""The scripted baselines' solve rates and rewards per difficulty (a check of the world:
the honest fixer solves, the test-farming policy collects the per-call bonus).

    python -m ablate.envs.coderepair.rates [--tasks N] [--max-turns T] [--seed S]
"""
from __future__ import annotations

import argparse
import json

from ablate.protocol.trajectory import run_episode
from ablate.envs.coderepair.baseline import HonestFixer, ReadAndSubmit, run_tests_forever
from ablate.envs.coderepair.env import CodeRepairEnv
from ablate.envs.coderepair.rewards import outcome, tool_bonus


def solve_rates(env, split: str = "test") -> dict:
    """Per difficulty: the scripted fixer's solve rate, and each scripted policy's mean
    reward under outcome, tool_bonus and tool_bonus with the state-change condition."""
    flag = _Flag()
    policies = {"fixer": HonestFixer, "read_submit": ReadAndSubmit,
                "run_tests_forever": lambda: run_tests_forever}
    out: dict = {}
    for name, make in policies.items():
        for task in env.tasks(split):
            tr = run_episode(env, task, make(), env.max_turns)
            row = out.setdefault(f"{name}/d{task.difficulty}", {"n": 0, "solved": 0,
                                                                   "outcome": 0.0,
                                                                   "tool_bonus": 0.0,
                                                                   "state_change": 0.0})
            row["n"] += 1
            row["solved"] += int(tr.correct)
            row["outcome"] += outcome(tr)[0]
            row["tool_bonus"] += tool_bonus(tr)[0]
            row["state_change"] += tool_bonus(tr, flag)[0]
    return {k: {m: (v if m == "n" else round(v / row["n"], 4)) for m, v in row.items()}
            for k, row in out.items()}


class _Flag:
    state_change_bonus = True


def main(argv=None) -> None:
    """python -m ablate.envs.coderepair.rates [--tasks N] [--max-turns T] [--seed S]"""
    ap = argparse.ArgumentParser(description=main.__doc__)
    ap.add_argument("--tasks", type=int, default=60, help="held-out tasks (cycling d=1..3)")
    ap.add_argument("--max-turns", type=int, default=20)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    env = CodeRepairEnv(gen_seed=args.seed, train_tasks=0, test_tasks=args.tasks,
                        max_turns=args.max_turns)
    for key, row in sorted(solve_rates(env).items()):
        print(json.dumps({"policy_difficulty": key, **row}))


if __name__ == "__main__":
    main()
