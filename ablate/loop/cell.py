"""run_cell(cfg, out_dir): one cell of an ablation grid, from config to evaluated policy.

    environment -> policy (+ learner, sampler) -> [rollout -> judge -> reward -> advantage
    -> (dynamic sampling) -> update -> push weights] x max_steps, evaluating every
    eval.every steps on a fixed held-out subset -> COMPLETE

Every random choice is a function of (seed, step, round), so a cell killed at any point
and restarted from its last checkpoint reproduces the uninterrupted run row for row.
With trainer.max_async_level = k > 0 the training rollouts come from a producer process
up to k policy versions behind (ablate.loop.async_rollout); a resumed async run restarts that
pipeline from the checkpoint, so it is not row-for-row the uninterrupted async run.
"""
from __future__ import annotations

import json
import logging
import sys
import time
from pathlib import Path

import torch
from omegaconf import DictConfig

from ablate.core import dist
from ablate.core.dist import local_world_size
from ablate.core.errors import ConfigError
from ablate.core.seeding import derived_seed, seed_everything
from ablate.core.memory import reuse_freed_memory
from ablate.core.threads import available_cpus, cell_threads
from ablate.envs import check_reward_for, declared, describe as describe_env, make_env, \
    split_tasks
from ablate.loop.tracking import Tracker
from ablate.algos import build_algorithm
from ablate.loop.async_rollout import AsyncRollouts
from ablate.algos import DynamicSampler
from ablate.algos import dynamic_sampling_filter
from ablate.algos.protocol import StepContext
from ablate.harness.chat import render_episode_text
from ablate.loop.config import validate
from ablate.loop.distributed import Stopped, at_step, peer_failure, watch_peers
from ablate.loop.eval_metrics import GREEDY, SAMPLED
from ablate.loop.outputs import CellDir
from ablate.loop.provenance import record_code
from ablate.loop.ranks import act_scored, agree, eval_scored, learner_rows
from ablate.loop.resume import check_resume, config_changes, describe, record_changes, \
    stored_config
from ablate.loop.policy import ModelPolicy, ScriptedPolicy
from ablate.loop.policy import with_agent_state
from ablate.loop.scoring import (eval_history, eval_rows, eval_subset, eval_summary,
                                 sample_step_tasks, score)
from ablate.harness.parser import outcome_labels, step_metrics as harness_step_metrics

log = logging.getLogger("ablate.loop.cell")


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
    if dist.init(cfg.run.dist_timeout_s):   # under a launcher: ranks (docs/distributed.md)
        cfg.run.world_size = dist.world_size()
        watch_peers()   # a peer that dies: one line on the survivors (distributed.py)
    # rank 0's directory (Hydra's default run dir is a time stamp, per process)
    out_dir = dist.broadcast_object(str(out_dir))
    cell = CellDir(out_dir, writer=dist.is_writer())
    if not cell.writer:
        _quiet_rank()
    try:
        # rank 0 holds the cell's lock (CellBusy if another live process runs this cell)
        if agree(lambda: _lock_unless_complete(cell)):
            return _replay_complete(cell, on_eval, cfg)
        return _run_locked(cfg, cell, on_eval)
    except (Exception, Stopped) as exc:
        failure = peer_failure(exc, cell.ckpt)
        if failure is None:
            raise
        raise failure from None
    finally:
        cell.unlock()


def _quiet_rank() -> None:
    """Ranks > 0 log warnings only, to the terminal (rank 0 writes the cell's log)."""
    logging.getLogger("ablate").setLevel(logging.WARNING)
    root = logging.getLogger()
    for h in [h for h in root.handlers if isinstance(h, logging.FileHandler)]:
        root.removeHandler(h)


def _lock_unless_complete(cell: CellDir) -> bool:
    """Lock the cell unless it is complete; complete? (it may have finished between the
    check and the lock)"""
    if not cell.complete:
        cell.lock()
    return cell.complete


def _replay_complete(cell: CellDir, on_eval, cfg: DictConfig | None = None) -> dict:
    stored = stored_config(cell.path) if cfg is not None else None
    changes = config_changes(stored, cfg) if stored is not None else {}
    if changes:
        log.warning("cell %s is complete with another config (%s): skipped, its results "
                    "are those of the config it ran with; use a new output directory to "
                    "run the new one", cell.path, describe(changes))
    else:
        log.info("cell %s is complete; skipping", cell.path)
    if on_eval is not None:  # replay its evaluations (e.g. to an Optuna pruner)
        for step, summary in eval_history(cell.rows("eval.jsonl")):
            on_eval(step, summary)
    return json.loads((cell.path / "summary.json").read_text())


def _started(cell: CellDir) -> bool:
    """Any work of an earlier run on disk (rows or a checkpoint)?"""
    rows = any((cell.path / n).exists() and (cell.path / n).stat().st_size > 0
               for n in ("metrics.jsonl", "eval.jsonl"))
    return rows or (cell.ckpt.is_dir() and any(cell.ckpt.glob("step_*")))


def _restore_checkpointed_row(cell: CellDir, start: int, client: dict) -> None:
    """The metrics row of the restored step travels in its checkpoint: if the file lost
    it (a torn last line), put it back, so no step's row is lost for good."""
    row = (client or {}).get("metrics_row")
    if row is None or any(r.get("step") == start for r in cell.rows("metrics.jsonl")):
        return
    log.warning("metrics.jsonl lacked the row of step %d (a torn line?): restored from "
                "its checkpoint", start)
    cell.append("metrics.jsonl", row)


def final_summary(cell: CellDir, last_eval: dict | None, max_steps: int, t0: float) -> dict:
    """summary.json's content; a resume past the last checkpoint evaluates nothing, so
    the final evaluation is rebuilt from its rows on disk (idempotent COMPLETE window)."""
    if last_eval is None:
        history = eval_history(cell.rows("eval.jsonl"))
        if history and history[-1][0] == max_steps:
            last_eval = history[-1][1]
    return {"final_step": max_steps,
            "final_accuracy": last_eval["eval/accuracy"] if last_eval else None,
            "final_eval": last_eval, "seconds": time.time() - t0}


def _run_locked(cfg: DictConfig, cell: CellDir, on_eval) -> dict:
    changes = agree(lambda: check_resume(cell.path, cfg, _started(cell)))
    cell.write_config(cfg)
    seed_everything(cfg.seed)
    threads = cell_threads(cfg.run.num_threads, cpus=available_cpus(),
                           local_ranks=local_world_size(),
                           async_level=cfg.trainer.max_async_level,
                           in_process_sampler=cfg.sampler.name == "hf")
    if threads > 0:
        torch.set_num_threads(threads)
    if cfg.run.malloc_reuse:
        reuse_freed_memory()
    log.info("torch threads: %d (run.num_threads=%s)", torch.get_num_threads(),
             cfg.run.num_threads)
    t0 = time.time()
    env = make_env(cfg.env, judge_cfg=cfg.judge, cfg=cfg)
    judge = env   # correctness comes from the environment (and its configured judge)
    cell.write_text("environment.json", json.dumps(
        {**describe_env(env), "outcome_labels": outcome_labels(env)}, indent=2))
    if cell.writer:
        record_code(cell)
    try:
        check_reward_for(cfg.reward, env)
    except ValueError as e:
        raise ConfigError(str(e)) from None
    eval_tasks = eval_subset(split_tasks(env, "test"), cfg.eval.num_tasks, cfg.eval.offset)
    scripted = cfg.model.name == "scripted"
    policy = ScriptedPolicy(env, cfg) if scripted else ModelPolicy(env, cfg, cell.ckpt)
    log.info("cell ready in %.1fs: %d train / %d eval tasks, policy=%s", time.time() - t0,
             len(split_tasks(env, "train")), len(eval_tasks), cfg.model.name)

    tracker = Tracker(cfg, cell.path, cell.writer)
    start = 0
    if policy.learns:
        restored = policy.learner.load()
        if restored is not None:
            start, client = restored
            policy.push_weights(start)
            log.info("resumed from checkpoint at step %d", start)
    at_step(start)
    cell.truncate_after(start if start > 0 else -1)
    if start > 0:
        _restore_checkpointed_row(cell, start, client)
    change_note = (record_changes(cell.path, start, changes) if cell.writer else
                   describe(changes, limit=len(changes))) if changes else None
    if changes:
        log.warning("resuming cell %s at step %d with a changed config "
                    "(run.allow_config_change=true): %s", cell.path, start, change_note)

    def evaluate(step: int) -> dict:
        te = time.time()
        e = cfg.eval
        # k samples per question at the evaluation (by default the training) temperature
        temp = cfg.sampler.temperature if e.temperature is None else e.temperature
        # sampled and greedy rows in one rollout where the sampler can (policy.py); with
        # several ranks the questions are shared out and the rows gathered (ranks.py)
        (episodes, rewards), (g_eps, g_rew) = eval_scored(
            policy, eval_tasks, e.samples, judge, cfg.reward, temperature=temp,
            greedy=e.greedy, seed=derived_seed(cfg.seed, step, 99991),
            greedy_seed=derived_seed(cfg.seed, step, 99992))
        rows = eval_rows(step, episodes, rewards, SAMPLED if temp > 0 else GREEDY)
        if g_eps:   # the greedy pass reported beside it
            rows += eval_rows(step, g_eps, g_rew, GREEDY)
        cell.append("eval.jsonl", rows)
        write_trajectories(cell, step, episodes, rewards, cfg.run.num_trajectories)
        summary = eval_summary(step, rows)
        summary["eval/seconds"] = time.time() - te
        acc = summary["eval/accuracy"]
        tracker.log(summary, step)
        log.info("eval step %d: accuracy %.3f (%s)", step, acc, ", ".join(   # by the
            f"{declared(env).breakdown_label} {k.split('hops')[-1]}: {v:.3f}"         # env's label
            for k, v in summary.items() if "accuracy_hops" in k))
        if on_eval is not None:
            on_eval(step, summary)
        return summary

    algorithm = build_algorithm(cfg.algo, max_len=cfg.harness.max_tokens_per_episode, cfg=cfg)
    algorithm = with_agent_state(policy, algorithm)   # agent=voyager's library, curriculum
    if start > 0:   # an algorithm's own state (e.g. PPO's critic) resumes with the learner
        load_algorithm_state(algorithm, policy.learner, cell.ckpt, start)
    # every setting of the algorithm, implicit defaults included, beside the config
    cell.write_text("objective.json", json.dumps(algorithm.describe(), indent=2))
    max_steps = cfg.trainer.max_steps if policy.learns else 0
    last_eval = None
    if start == 0 and (cfg.eval.at_start or max_steps == 0):
        last_eval = evaluate(0)

    progress = Progress(max_steps, cfg.run.quiet or not cell.writer, tracker.name)
    if cfg.trainer.max_async_level > 0 and start < max_steps:
        policy.remote = AsyncRollouts(cfg, start, max_steps, policy.learner.export_state_dict())
    try:
        for step in range(start + 1, max_steps + 1):
            at_step(step)
            row = train_step(cfg, policy, env, judge, algorithm, step)
            if cfg.run.world_size > 1:
                row["dist/world_size"] = cfg.run.world_size
            if change_note is not None:   # the first row after an accepted change
                row["resume/config_changes"], change_note = change_note, None
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
                # the algorithm's state inside the learner's checkpoint folder: one
                # atomic, digested checkpoint (a kill cannot leave one without the other)
                policy.learner.save(step, {"step": step, "metrics_row": row},
                                    extra=lambda folder: algorithm.save(folder, step))
    finally:
        progress.close()
        if getattr(policy, "remote", None) is not None:
            policy.remote.close()

    summary = final_summary(cell, last_eval, max_steps, t0)
    cell.mark_complete(summary)
    tracker.finish(summary)
    return summary


def load_algorithm_state(algorithm, learner, legacy_dir: Path, step: int) -> None:
    """Restore the algorithm's state of the checkpoint the learner resumed from: inside its
    folder, or (checkpoints written before it moved there) beside it under `legacy_dir`."""
    try:
        algorithm.load(learner.checkpoint_dir(step), step)
    except FileNotFoundError as missing:
        try:
            algorithm.load(legacy_dir, step)
        except FileNotFoundError:
            raise missing from None


def train_step(cfg, policy, env, judge, algorithm, step: int) -> dict:
    """One optimizer step: rollouts (with dynamic-sampling refills), rewards, then the
    algorithm's training batch and loss (ablate.algos.protocol) for the learner's update."""

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
        tasks = sample_step_tasks(split_tasks(env, "train"), need, cfg.seed, step, round_, experience)
        if remote is not None:           # rolled out ahead, by older weights
            episodes, staleness = remote.take(step, tasks)
            scored = score(episodes, judge, cfg.reward)
        else:   # (with several ranks: the tasks shared out, scored, gathered; ranks.py)
            episodes, scored = act_scored(policy, tasks, t.group_size, judge, cfg.reward,
                                          temperature=cfg.sampler.temperature,
                                          seed=derived_seed(cfg.seed, step, round_))
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
        policy.sampler.yield_memory()   # vLLM on the learner's GPU sleeps until the push
        for epoch in range(a.ppo_epochs):
            stats = policy.learner.update(batch.segments, batch.advantages, loss_fn,
                                          **learner_rows(batch, loss_fn))
        row.update({f"update/{k}": v for k, v in stats.items()})
        policy.push_weights(step)
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

