"""run_cell(cfg, out_dir): one cell of an ablation grid, from config to evaluated policy.

    environment -> policy (+ learner, sampler) -> [rollout -> judge -> reward -> advantage
    -> (dynamic sampling) -> update -> push weights] x max_steps, evaluating every
    eval.every steps on a fixed held-out subset -> COMPLETE

Every random choice is a function of (seed, step, round), so a cell killed at any point
and restarted from its last checkpoint reproduces the uninterrupted run row for row.
With trainer.max_async_level = k > 0 the training rollouts come from a producer process
up to k policy versions behind (ablate.async_rollout); a resumed async run restarts that
pipeline from the checkpoint, so it is not row-for-row the uninterrupted async run.
"""
from __future__ import annotations

import copy
import json
import logging
import random
import sys
import time
from pathlib import Path

import numpy as np
import torch
from omegaconf import DictConfig

from ablate.config import ConfigError, validate
from ablate.eval_metrics import GREEDY, SAMPLED, summarise
from ablate.outputs import CellDir
from ablate.harness.parser import step_metrics as harness_step_metrics

log = logging.getLogger("ablate.cell")


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def derived_seed(*parts: int) -> int:
    """A stable 31-bit seed from integers (e.g. seed, step, round)."""
    return int(np.random.SeedSequence([int(p) & 0xFFFFFFFF for p in parts]).generate_state(1)[0]
               & 0x7FFFFFFF)


def sample_step_tasks(tasks: list, n: int, seed: int, step: int, round_: int,
                      experience=None) -> list:
    rng = np.random.default_rng(derived_seed(seed, step, round_, 17))
    if experience is not None:   # curriculum pool, buffer revisits (ablate.curriculum)
        return experience.sample(tasks, n, step, rng)
    idx = rng.choice(len(tasks), size=min(n, len(tasks)), replace=False)
    return [tasks[i] for i in idx]


def eval_subset(tasks: list, n: int, offset: int = 0) -> list:
    """n test tasks from index `offset`: a fixed subset shared by every cell (keeps
    comparisons paired); a later offset gives a confirmation set disjoint from the one
    settings were chosen on. An offset past the split is a ConfigError."""
    if offset >= len(tasks):
        raise ConfigError(f"eval.offset={offset}: the test split has only {len(tasks)} "
                          f"tasks (allowed: 0..{len(tasks) - 1})")
    return list(tasks[offset:offset + n])


# ---------------------------------------------------------------------------------------
# scoring: judge -> reward -> rows
# ---------------------------------------------------------------------------------------
def score(episodes, env, reward_cfg) -> list[tuple[float, dict]]:
    """Correctness from the environment (its judge), then the configured reward, looked
    up in the environment's own schemes first."""
    from ablate.rewards import compute_reward

    pending = [e for e in episodes if e.final_answer is not None and e.answered]
    verdicts = env.judge_many([(e.task, e.final_answer, e.state)
                               for e in pending]) if pending else []
    for e in episodes:
        e.correct = False
    for e, v in zip(pending, verdicts):
        e.correct = bool(v)
    schemes = env.reward_schemes()
    return [compute_reward(e, reward_cfg, schemes) for e in episodes]


def eval_summary(step: int, rows: list[dict]) -> dict:
    """Sampled accuracy (avg@k, the primary metric), pass@k, answer / "I don't know" /
    wrong rates, per-hop accuracy, and greedy accuracy beside them (ablate/eval_metrics.py)."""
    return summarise(step, rows)


def eval_history(rows: list[dict]) -> list[tuple[int, dict]]:
    steps = sorted({r["step"] for r in rows})
    return [(s, eval_summary(s, [r for r in rows if r["step"] == s])) for s in steps]


def eval_rows(step: int, episodes, rewards, decoding: str = SAMPLED) -> list[dict]:
    rows = []
    for e, (total, comps) in zip(episodes, rewards):
        row = {"step": step, "task_id": e.task.id, "sample": e.sample, "hops": e.task.hops,
               "correct": bool(e.correct), "reward": float(total), "decoding": decoding}
        row.update(e.behaviour())
        row.update({f"reward/{k}": float(v) for k, v in comps.items()})
        rows.append(row)
    return rows


# ---------------------------------------------------------------------------------------
# policies: the scripted baseline and a learning model
# ---------------------------------------------------------------------------------------
class ScriptedPolicy:
    """The no-learning baseline row: the environment's scripted baseline acting through
    the real tools."""
    learns = False

    def __init__(self, env, cfg):
        self.env, self.cfg = env, cfg

    def act(self, tasks, group_size, *, temperature, seed, evaluation=False):
        from ablate.envs import run_episode
        from ablate.harness.episode import scripted_episode
        episodes = []
        for gi, task in enumerate(tasks):
            for s in range(group_size):
                policy = self.env.baseline(task, derived_seed(seed, gi, s))
                if policy is None:
                    raise ValueError(f"model=scripted: env {self.env.name} has no "
                                     "scripted baseline")
                traj = run_episode(self.env, task, policy, self.cfg.env.max_turns)
                episodes.append(scripted_episode(traj, gi, s,
                                                 self.env.behaviour(task, traj.results)))
        return episodes


class ModelPolicy:
    """A language model acting through the harness; trained by the learner."""
    learns = True

    def __init__(self, env, cfg, ckpt_dir: Path):
        from ablate.learners import make_learner
        from ablate.models.loading import load_policy
        from ablate.samplers import make_sampler

        self.env, self.cfg = env, cfg
        self.remote = None   # the async rollout producer (trainer.max_async_level > 0)
        model, self.tokenizer = load_policy(cfg.model)
        # DeepSpeed partitions the learner's model in place: the sampler gets its own copy
        # (vLLM loads from the weights directory instead)
        local_dir = getattr(model, "name_or_path", None)
        if cfg.sampler.name == "vllm" and local_dir and Path(local_dir).is_dir():
            sampler_model = local_dir
        else:
            sampler_model = copy.deepcopy(model)
        ref_model = None
        if cfg.algo.kl_coef > 0:  # only then is a frozen reference loaded at all
            ref_model, _ = load_policy(cfg.model)
            ref_model.eval().requires_grad_(False)
        self.learner = make_learner(cfg.learner, model, lr=cfg.trainer.lr, seed=cfg.seed,
                                    temperature=cfg.sampler.temperature, ckpt_dir=ckpt_dir,
                                    ref_model=ref_model)
        self.sampler = make_sampler(cfg.sampler, sampler_model, self.tokenizer,
                                    device=cfg.run.device, dtype=cfg.model.dtype, seed=cfg.seed)
        self.push_weights()

    def push_weights(self):
        self.sampler.load_weights(self.learner.export_state_dict())

    def act(self, tasks, group_size, *, temperature, seed, evaluation=False):
        from ablate.agents import agent_for
        from ablate.harness.rollout import rollout
        c = self.cfg
        agent = agent_for(c, evaluation)   # agent=reflexion|lats (ablate/agents); else ReAct
        if agent is not None:
            return agent.act(self, tasks, group_size, temperature=temperature, seed=seed,
                             score=lambda eps: score(eps, self.env, c.reward))
        return rollout(tasks, group_size=group_size, sampler=self.sampler,
                       tokenizer=self.tokenizer, env=self.env,
                       harness_cfg=c.harness, mode_cfg=c.mode, max_turns=c.env.max_turns,
                       temperature=temperature, top_p=c.sampler.top_p, seed=seed,
                       model_cfg=c.model)


class SamplerPolicy(ModelPolicy):
    """ModelPolicy's acting half without a learner: the policy of the asynchronous rollout
    producer process (ablate.async_rollout), whose weights arrive from the learner."""

    def __init__(self, env, cfg):
        from ablate.models.loading import load_policy
        from ablate.samplers import make_sampler

        self.env, self.cfg, self.remote = env, cfg, None
        model, self.tokenizer = load_policy(cfg.model)
        self.sampler = make_sampler(cfg.sampler, model, self.tokenizer,
                                    device=cfg.run.device, dtype=cfg.model.dtype, seed=cfg.seed)


# ---------------------------------------------------------------------------------------
# the loop
# ---------------------------------------------------------------------------------------
class Progress:
    """Step / reward / accuracy / ETA on a terminal; one log line per step otherwise."""

    def __init__(self, total: int, quiet: bool, name: str):
        self.total, self.quiet, self.name = total, quiet, name
        self.live = None
        if not quiet and sys.stderr.isatty():
            from rich.progress import (BarColumn, Progress as RichProgress, TextColumn,
                                       TimeElapsedColumn, TimeRemainingColumn)
            self.live = RichProgress(TextColumn("[bold]{task.description}"), BarColumn(),
                                     TextColumn("{task.completed}/{task.total}"),
                                     TextColumn("{task.fields[info]}"), TimeElapsedColumn(),
                                     TextColumn("ETA"), TimeRemainingColumn(), transient=False)
            self.task = self.live.add_task(name, total=total, info="")
            self.live.start()

    def update(self, step: int, info: str):
        if self.live:
            self.live.update(self.task, completed=step, info=info)
        elif not self.quiet:
            log.info("%s step %d/%d %s", self.name, step, self.total, info)

    def close(self):
        if self.live:
            self.live.stop()


def run_cell(cfg: DictConfig, out_dir: str | Path, on_eval=None) -> dict:
    """Run (or resume, or skip if complete) one cell. `on_eval(step, summary)` is called
    after each evaluation (Optuna's pruner listens there and may raise TrialPruned)."""
    validate(cfg)
    cell = CellDir(out_dir)
    if not cell.complete:
        cell.lock()             # CellBusy if another live process runs this cell
    try:
        if cell.complete:       # (it may have finished between the check and the lock)
            return _replay_complete(cell, on_eval)
        return _run_locked(cfg, cell, on_eval)
    finally:
        cell.unlock()


def _replay_complete(cell: CellDir, on_eval) -> dict:
    log.info("cell %s is complete; skipping", cell.path)
    if on_eval is not None:  # replay its evaluations (e.g. to an Optuna pruner)
        for step, summary in eval_history(cell.rows("eval.jsonl")):
            on_eval(step, summary)
    return json.loads((cell.path / "summary.json").read_text())


def _run_locked(cfg: DictConfig, cell: CellDir, on_eval) -> dict:
    cell.write_config(cfg)
    seed_everything(cfg.seed)
    if cfg.run.num_threads > 0:
        torch.set_num_threads(cfg.run.num_threads)

    from ablate.envs import make_env
    from ablate.tracking import Tracker

    t0 = time.time()
    env = make_env(cfg.env, judge_cfg=cfg.judge, cfg=cfg)
    judge = env   # correctness comes from the environment (and its configured judge)
    from ablate.rewards import check_reward_for
    try:
        check_reward_for(cfg.reward, env)
    except ValueError as e:
        raise ConfigError(str(e)) from None
    eval_tasks = eval_subset(env.test_tasks, cfg.eval.num_tasks, cfg.eval.offset)
    scripted = cfg.model.name == "scripted"
    policy = ScriptedPolicy(env, cfg) if scripted else ModelPolicy(env, cfg, cell.ckpt)
    log.info("cell ready in %.1fs: %d train / %d eval tasks, policy=%s", time.time() - t0,
             len(env.train_tasks), len(eval_tasks), cfg.model.name)

    tracker = Tracker(cfg, cell.path)
    start = 0
    if policy.learns:
        restored = policy.learner.load()
        if restored is not None:
            start, _client = restored
            policy.push_weights()
            log.info("resumed from checkpoint at step %d", start)
    cell.truncate_after(start if start > 0 else -1)

    def evaluate(step: int) -> dict:
        te = time.time()
        e = cfg.eval
        # k samples per question at the evaluation (by default the training) temperature
        temp = cfg.sampler.temperature if e.temperature is None else e.temperature
        episodes = policy.act(eval_tasks, e.samples, temperature=temp,
                              seed=derived_seed(cfg.seed, step, 99991), evaluation=True)
        rewards = score(episodes, judge, cfg.reward)
        rows = eval_rows(step, episodes, rewards, SAMPLED if temp > 0 else GREEDY)
        if e.greedy and temp > 0:   # a second, greedy pass reported beside it
            g_eps = policy.act(eval_tasks, 1, temperature=0.0,
                               seed=derived_seed(cfg.seed, step, 99992), evaluation=True)
            rows += eval_rows(step, g_eps, score(g_eps, judge, cfg.reward), GREEDY)
        cell.append("eval.jsonl", rows)
        write_trajectories(cell, step, episodes, rewards, cfg.run.num_trajectories)
        summary = eval_summary(step, rows)
        summary["eval/seconds"] = time.time() - te
        acc = summary["eval/accuracy"]
        tracker.log(summary, step)
        log.info("eval step %d: accuracy %.3f (%s)", step, acc, ", ".join(
            f"{k.split('_')[-1]} {v:.3f}" for k, v in summary.items() if "hops" in k))
        if on_eval is not None:
            on_eval(step, summary)
        return summary

    from ablate.algos import build_algorithm
    algorithm = build_algorithm(cfg.algo, max_len=cfg.harness.max_tokens_per_episode, cfg=cfg)
    if start > 0:   # an algorithm's own state (e.g. PPO's critic) resumes with the learner
        algorithm.load(cell.ckpt, start)
    # every setting of the algorithm, implicit defaults included, beside the config
    cell.write_text("objective.json", json.dumps(algorithm.describe(), indent=2))
    max_steps = cfg.trainer.max_steps if policy.learns else 0
    last_eval = None
    if start == 0 and (cfg.eval.at_start or max_steps == 0):
        last_eval = evaluate(0)

    progress = Progress(max_steps, cfg.run.quiet, tracker.name)
    if cfg.trainer.max_async_level > 0 and start < max_steps:
        from ablate.async_rollout import AsyncRollouts
        policy.remote = AsyncRollouts(cfg, start, max_steps, policy.learner.export_state_dict())
    try:
        for step in range(start + 1, max_steps + 1):
            row = train_step(cfg, policy, env, judge, algorithm, step)
            if policy.remote is not None and policy.remote.wanted(step, max_steps):
                tp = time.time()
                policy.remote.push(step, policy.learner.export_state_dict())
                row["async/push_s"] = time.time() - tp
            cell.append("metrics.jsonl", row)
            tracker.log(row, step)
            progress.update(step, f"reward {row['reward/mean']:.3f} acc {row['accuracy']:.2f}")
            every = cfg.eval.every
            if (every and step % every == 0) or step == max_steps:
                last_eval = evaluate(step)
            ck = cfg.learner.checkpoint_every
            if (ck and step % ck == 0) or step == max_steps:
                policy.learner.save(step, {"step": step})
                algorithm.save(cell.ckpt, step)
    finally:
        progress.close()
        if getattr(policy, "remote", None) is not None:
            policy.remote.close()

    summary = {"final_step": max_steps,
               "final_accuracy": last_eval["eval/accuracy"] if last_eval else None,
               "final_eval": last_eval, "seconds": time.time() - t0}
    cell.mark_complete(summary)
    tracker.finish(summary)
    return summary


def train_step(cfg, policy, env, judge, algorithm, step: int) -> dict:
    """One optimizer step: rollouts (with dynamic-sampling refills), rewards, then the
    algorithm's training batch and loss (ablate.algos.protocol) for the learner's update."""
    from ablate.algos import DynamicSampler

    a, t = cfg.algo, cfg.trainer
    experience = getattr(algorithm, "experience", None)   # curriculum / trajectory buffer
    ts, tc = time.time(), time.process_time()   # wall, and this process's CPU (all threads)
    # without dynamic sampling every group is kept: one round, no filter
    sampler = DynamicSampler(t.tasks_per_step,
                             a.dynamic_sampling.max_batches if a.dynamic_sampling.enable else 0)
    seen_rewards, comps_sum, correct, answered, n_eps, generated = [], {}, 0, 0, 0, 0
    encoded = 0.0                        # tokens the sampler fed through the model
    remote = getattr(policy, "remote", None)   # asynchronous rollouts (max_async_level > 0)
    staleness = {"async/staleness": 0}
    kept_all: list = []
    step_eps: list = []                  # every episode rolled out this step (all rounds)
    round_ = 0
    while True:
        need = t.tasks_per_step if round_ == 0 else t.tasks_per_step - sampler.kept_groups
        tasks = sample_step_tasks(env.train_tasks, need, cfg.seed, step, round_, experience)
        if remote is not None:           # rolled out ahead, by older weights
            episodes, staleness = remote.take(step, tasks)
        else:
            episodes = policy.act(tasks, t.group_size, temperature=cfg.sampler.temperature,
                                  seed=derived_seed(cfg.seed, step, round_))
        scored = score(episodes, judge, cfg.reward)
        step_eps += episodes
        # DAPO eq. 13 overlong penalty joins the task reward (a no-op unless enabled)
        rewards = algorithm.shape_rewards([r for r, _ in scored], episodes)
        for _, comps in scored:
            for k, v in comps.items():
                comps_sum[k] = comps_sum.get(k, 0.0) + float(v)
        n_eps += len(episodes)
        correct += sum(bool(e.correct) for e in episodes)
        answered += sum(e.answered for e in episodes)
        generated += sum(e.env_metrics.get("agent_tokens", e.response_tokens)
                         for e in episodes)   # an agent's search / reflections included
        encoded += sum(e.encoded_tokens for e in episodes)
        seen_rewards.append(rewards)
        groups = [e.group for e in episodes]
        if a.dynamic_sampling.enable:
            sampler.add(rewards, groups, episodes)
        else:
            kept_all = (episodes, rewards, groups)
            break
        round_ += 1
        if sampler.done:
            break
    rollout_s = time.time() - ts

    rewards_all = torch.cat(seen_rewards)
    row = {"step": step, "reward/mean": float(rewards_all.mean()),
           "reward/std": float(rewards_all.std()) if len(rewards_all) > 1 else 0.0,
           "accuracy": correct / max(n_eps, 1), "answered": answered / max(n_eps, 1),
           "episodes": n_eps, "generated_tokens": generated, "rollout_s": rollout_s,
           "sampler/encoded_tokens": encoded, **staleness}
    row.update({f"reward/{k}": v / max(n_eps, 1) for k, v in comps_sum.items()})
    row.update(harness_step_metrics(step_eps, bool(cfg.harness.predict)))
    if a.dynamic_sampling.enable:
        eps, rewards, groups = sampler.batch()
        row.update(sampler.metrics())
        row["kept_fraction"] = row["dynamic_sampling/kept_fraction"]
    else:
        eps, rewards, groups = kept_all
        row["kept_fraction"] = 1.0
    # fraction of groups with any reward variance: how much GRPO signal this step carries
    from ablate.algos import dynamic_sampling_filter
    mixed, _ = dynamic_sampling_filter(rewards_all, [i // t.group_size
                                                     for i in range(len(rewards_all))])
    row["mixed_groups"] = len(mixed) / max(len(rewards_all) // t.group_size, 1)

    if experience is not None:
        eps, rewards, groups = experience.after_rollout(step, eps, rewards, groups, row)
    if eps and hasattr(algorithm, "augment"):   # RFT/STaR filter, DPO pairs (ablate.algos)
        eps, rewards, groups = augment(cfg, policy, judge, algorithm, step, eps, rewards,
                                       groups, row)
    tu = time.time()
    if eps:
        batch = algorithm.prepare(eps, rewards, groups, policy.learner)
        row.update(batch.metrics)
        loss_fn = algorithm.loss_fn(batch)
        for epoch in range(a.ppo_epochs):
            stats = policy.learner.update(batch.segments, batch.advantages, loss_fn)
        row.update({f"update/{k}": v for k, v in stats.items()})
        policy.push_weights()
    else:
        row["update/skipped"] = 1.0  # no group with differing rewards: no signal this step
    row["update_s"] = time.time() - tu
    row["step_s"] = time.time() - ts
    # CPU seconds the step cost, the async producer's rollout included: a cost that
    # neighbours on a shared machine do not inflate, unlike step_s (a vLLM engine's own
    # processes are not counted: with sampler=vllm it is the learner's side only)
    row["step_cpu_s"] = time.process_time() - tc + row.get("async/producer_cpu_s", 0.0)
    return row


def augment(cfg, policy, judge, algorithm, step, eps, rewards, groups, row):
    """The algorithm's hook between scoring and `prepare` (ablate.algos.protocol)."""
    from ablate.algos.protocol import StepContext
    ctx = StepContext(step, cfg.trainer.group_size, score=lambda e: score(e, judge, cfg.reward),
                      act=lambda tasks, n: policy.act(
                          tasks, n, temperature=cfg.sampler.temperature,
                          seed=derived_seed(cfg.seed, step, 7919)),
                      cfg=cfg, tokenizer=getattr(policy, "tokenizer", None), env=judge)
    eps, rewards, groups, metrics = algorithm.augment(eps, rewards, groups, ctx)
    row["generated_tokens"] += int(metrics.pop("generated_tokens", 0))
    row.update(metrics)
    return eps, rewards, groups


def write_trajectories(cell: CellDir, step: int, episodes, rewards, limit: int) -> None:
    from ablate.harness.chat import render_episode_text

    chosen = list(zip(episodes, rewards))[:limit]
    rows = []
    text = [f"==================== evaluation at step {step} ====================\n"]
    for e, (total, comps) in chosen:
        rec = e.to_json()
        rec.update({"step": step, "reward": float(total), "components": comps})
        rows.append(rec)
        text.append(render_episode_text(e, comps) + "\n")
    cell.append("trajectories.jsonl", rows)
    cell.write_text("trajectories.txt", "\n".join(text), append=True)

