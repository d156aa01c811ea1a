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
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from omegaconf import DictConfig

from ablate.core import dist
from ablate.core.dist import local_world_size
from ablate.core.errors import ConfigError
from ablate.core.seeding import derived_seed, seed_everything
from ablate.core.turns import step_boundary
from ablate.core.memory import reuse_freed_memory
from ablate.core.threads import (AUTO, available_cpus, cell_threads, parse_threads,
                                 update_threads)
from ablate.envs import (check_reward_for, declared, describe as describe_env, env_class,
                         make_env, split_tasks)
from ablate.loop.tracking import Tracker
from ablate.algos import build_algorithm
from ablate.loop.async_rollout import AsyncRollouts, producer_weights
from ablate.algos import dynamic_sampling_filter
from ablate.algos.dynamic_sampling import Refilled, refill
from ablate.algos.protocol import StepContext
from ablate.harness.chat import render_episode_text
from ablate.loop.config import validate
from ablate.loop.distributed import Stopped, at_step, peer_failure, watch_peers
from ablate.loop.eval_metrics import GREEDY, SAMPLED
from ablate.loop.outputs import CellDir
from ablate.loop.provenance import record_code
from ablate.loop.ranks import act_scored, agree, eval_scored, learner_rows
from ablate.loop.resume import (check_resume, config_changes, describe, record_changes,
                                stored_config)
from ablate.loop.policy import ModelPolicy, ScriptedPolicy
from ablate.loop.policy import with_agent_state
from ablate.loop.scoring import (eval_history, eval_rows, eval_subset, eval_summary,
                                 sample_step_tasks, score)
from ablate.harness.parser import outcome_labels, step_metrics as harness_step_metrics
from ablate.learners.config import offloaded
from ablate.samplers import SAMPLERS

log = logging.getLogger("ablate.loop.cell")
# set by hydra/launcher=pack around each cell it runs (ablate/apps/pack.py, run_pack): the
# pack's record, JSON, which environment.json keeps as its `pack`
PACK_ENV = "ABLATE_PACK"


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


def _replay_complete(cell: CellDir, on_eval, cfg: DictConfig) -> dict:
    stored = stored_config(cell.path)
    changes = config_changes(stored, cfg) if stored is not None else {}
    if changes:
        log.warning("cell %s is complete with another config (%s): skipped, its results "
                    "are those of the config it ran with; use a new output directory to "
                    "run the new one", cell.path, describe(changes))
    else:
        log.info("cell %s is complete; skipping", cell.path)
    if on_eval is not None:  # replay its evaluations (e.g. to an Optuna pruner)
        for step, summary in eval_history(cell.rows("eval.jsonl"), level_column(cfg)):
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


def level_column(cfg: DictConfig) -> str:
    """The eval rows' column of the tasks' difficulty: the world's word for it
    (Declared.breakdown_label, ablate/envs/registry.py)."""
    return declared(env_class(cfg.env)).breakdown_label


def final_summary(cell: CellDir, last_eval: dict | None, max_steps: int, t0: float,
                  level: str) -> dict:
    """summary.json's content; a resume past the last checkpoint evaluates nothing, so
    the final evaluation is rebuilt from its rows on disk (idempotent COMPLETE window)."""
    if last_eval is None:
        history = eval_history(cell.rows("eval.jsonl"), level)
        if history and history[-1][0] == max_steps:
            last_eval = history[-1][1]
    return {"final_step": max_steps,
            "final_accuracy": last_eval["eval/accuracy"] if last_eval else None,
            "final_eval": last_eval, "seconds": time.time() - t0}


def _run_locked(cfg: DictConfig, cell: CellDir, on_eval) -> dict:
    changes = agree(lambda: check_resume(cell.path, cfg, _started(cell)))
    cell.write_config(cfg)
    seed_everything(cfg.seed)
    _set_threads(cfg)
    t0 = time.time()
    env = _open_env(cfg, cell)
    judge = env   # correctness comes from the environment (and its configured judge)
    eval_tasks = eval_subset(split_tasks(env, "test"), cfg.eval.num_tasks, cfg.eval.offset)
    scripted = cfg.model.name == "scripted"
    policy = ScriptedPolicy(env, cfg) if scripted else ModelPolicy(env, cfg, cell.ckpt)
    log.info("cell ready in %.1fs: %d train / %d eval tasks, policy=%s", time.time() - t0,
             len(split_tasks(env, "train")), len(eval_tasks), cfg.model.name)

    tracker = Tracker(cfg, cell.path, cell.writer)
    start, change_note = _resume(cell, policy, changes)
    evaluate = Evaluator(cfg, cell, policy, judge, eval_tasks, tracker, on_eval)
    algorithm = _algorithm(cfg, cell, policy, start)
    max_steps = cfg.trainer.max_steps if policy.learns else 0
    last_eval = None
    if start == 0 and (cfg.eval.at_start or max_steps == 0):
        last_eval = evaluate(0)
    # the last evaluation of the training steps, if any ran (a summary is never empty)
    last_eval = _train(cfg, cell, policy, judge, algorithm, tracker, evaluate, start,
                       max_steps, change_note) or last_eval

    summary = final_summary(cell, last_eval, max_steps, t0, evaluate.level)
    cell.mark_complete(summary)
    tracker.finish(summary)
    return summary


def _set_threads(cfg: DictConfig) -> None:
    """torch's CPU threads for this process (ablate.core.threads) and malloc's reuse; the
    learner's update is exempt from an engine's one-thread rule and gets the cell's cores
    under optimizer offload (learner.update_threads resolved, issue 61 fault 10)."""
    in_process = SAMPLERS.declared(cfg.sampler.name).can("in_process")
    cpus, ranks = available_cpus(), local_world_size()
    threads = cell_threads(cfg.run.num_threads, cpus=cpus, local_ranks=ranks,
                           async_level=cfg.trainer.max_async_level,
                           in_process_sampler=in_process)
    if threads > 0:
        torch.set_num_threads(threads)
    lc = cfg.learner
    lc.update_threads = update_threads(
        lc.update_threads, process=torch.get_num_threads(), cpus=cpus, local_ranks=ranks,
        engine_rule=parse_threads(cfg.run.num_threads) == AUTO and not in_process,
        host_optimizer=offloaded(lc, "offload_optimizer"))
    if cfg.run.malloc_reuse:
        reuse_freed_memory()
    log.info("torch threads: %d, update %s (run.num_threads=%s)", torch.get_num_threads(),
             lc.update_threads or "the same", cfg.run.num_threads)


def _open_env(cfg: DictConfig, cell: CellDir):
    """The cell's environment, described in environment.json; the code's provenance; a
    ConfigError if the configured reward does not fit the environment."""
    env = make_env(cfg.env, cfg=cfg)
    pack = os.environ.get(PACK_ENV)
    cell.write_text("environment.json", json.dumps(
        {**describe_env(env), "outcome_labels": outcome_labels(env),
         **({"pack": json.loads(pack)} if pack else {})}, indent=2))
    if cell.writer:
        record_code(cell)
    try:
        check_reward_for(cfg.reward, env)
    except ValueError as e:
        raise ConfigError(str(e)) from None
    return env


def _resume(cell: CellDir, policy, changes: dict) -> tuple[int, str | None]:
    """(the step of the learner's last checkpoint, 0 if none; the note of an accepted
    config change for the next metrics row, or None). Rows past that step are dropped."""
    start, client = 0, None
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
    return start, change_note


def _algorithm(cfg: DictConfig, cell: CellDir, policy, start: int):
    """The configured algorithm (ablate.algos.protocol.Algorithm), its state restored on
    resume, every setting of it (implicit defaults included) in objective.json."""
    algorithm = build_algorithm(cfg.algo, max_len=cfg.harness.max_tokens_per_episode, cfg=cfg)
    algorithm = with_agent_state(policy, algorithm)   # agent=voyager's library, curriculum
    if start > 0:   # an algorithm's own state (e.g. PPO's critic) resumes with the learner
        load_algorithm_state(algorithm, policy.learner, cell.ckpt, start)
    cell.write_text("objective.json", json.dumps(algorithm.describe(), indent=2))
    return algorithm


class Evaluator:
    """evaluate(step) -> summary: the fixed held-out tasks rolled out (k samples per
    question, and a greedy pass), their rows in eval.jsonl, trajectories, tracker, log
    line, then `on_eval(step, summary)`."""

    def __init__(self, cfg, cell: CellDir, policy, env, tasks: list, tracker, on_eval):
        self.cfg, self.cell, self.policy, self.env, self.tasks = cfg, cell, policy, env, tasks
        self.tracker, self.on_eval = tracker, on_eval
        self.level = level_column(cfg)    # the rows' difficulty column, in the world's word

    def __call__(self, step: int) -> dict:
        te, cfg = time.time(), self.cfg
        rows, episodes, rewards = self.rollout(step)
        self.cell.append("eval.jsonl", rows)
        write_trajectories(self.cell, step, episodes, rewards, cfg.run.num_trajectories)
        summary = eval_summary(step, rows, self.level)
        summary["eval/seconds"] = time.time() - te
        self.report(step, summary)
        return summary

    def rollout(self, step: int) -> tuple[list, list, list]:
        """(rows, the sampled episodes, their rewards) of this step's evaluation."""
        cfg, e = self.cfg, self.cfg.eval
        # k samples per question at the evaluation (by default the training) temperature
        temp = cfg.sampler.temperature if e.temperature is None else e.temperature
        # sampled and greedy rows in one rollout where the sampler can (policy.py); with
        # several ranks the questions are shared out and the rows gathered (ranks.py)
        (episodes, rewards), (g_eps, g_rew) = eval_scored(
            self.policy, self.tasks, e.samples, self.env, cfg.reward, temperature=temp,
            greedy=e.greedy, seed=derived_seed(cfg.seed, step, 99991),
            greedy_seed=derived_seed(cfg.seed, step, 99992))
        rows = eval_rows(step, episodes, rewards, SAMPLED if temp > 0 else GREEDY,
                         self.level)
        if g_eps:   # the greedy pass reported beside it
            rows += eval_rows(step, g_eps, g_rew, GREEDY, self.level)
        return rows, episodes, rewards

    def report(self, step: int, summary: dict) -> None:
        self.tracker.log(summary, step)
        by = f"eval/accuracy_{self.level}"
        log.info("eval step %d: accuracy %.3f (%s)", step, summary["eval/accuracy"], ", ".join(
            f"{self.level} {k[len(by):]}: {v:.3f}" for k, v in summary.items()
            if k.startswith(by)))
        if self.on_eval is not None:
            self.on_eval(step, summary)


def _train(cfg, cell: CellDir, policy, env, algorithm, tracker, evaluate, start: int,
           max_steps: int, change_note: str | None) -> dict | None:
    """Steps start+1..max_steps, each row appended, evaluations and checkpoints on their
    schedule; the last evaluation's summary (None if none ran)."""
    last_eval = None
    progress = Progress(max_steps, cfg.run.quiet or not cell.writer, tracker.name)
    if cfg.trainer.max_async_level > 0 and start < max_steps:
        policy.remote = AsyncRollouts(cfg, start, max_steps, producer_weights(policy))
    try:
        for step in range(start + 1, max_steps + 1):
            step_boundary()   # a pack's cell may hand the process to the next one here
            at_step(step)
            row = train_step(Step(cfg, policy, env, algorithm, step))
            change_note = _annotate(cfg, policy, row, step, max_steps, change_note)
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
        if policy.remote is not None:
            policy.remote.close()
        if getattr(policy, "learner", None) is not None:
            policy.learner.close()   # the next cell of an in-process grid starts clean
    return last_eval


def _annotate(cfg, policy, row: dict, step: int, max_steps: int, change_note):
    """The row's run-level fields: world size, an accepted config change (once), the
    weights pushed to the async producer; the change note still to report."""
    if cfg.run.world_size > 1:
        row["dist/world_size"] = cfg.run.world_size
    if change_note is not None:   # the first row after an accepted change
        row["resume/config_changes"], change_note = change_note, None
    if policy.remote is not None and policy.remote.wanted(step, max_steps):
        tp = time.time()
        # a LoRA cell's adapter alone, else the merged state (async_rollout.producer_weights)
        row["async/push_bytes"] = float(policy.remote.push(step, producer_weights(policy)))
        row["async/push_s"] = time.time() - tp
    return change_note


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


# ---------------------------------------------------------------------------------------
# one training step: collect, then update
# ---------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Step:
    """What one training step works with, passed whole instead of by position."""
    cfg: DictConfig
    policy: Any          # ScriptedPolicy | ModelPolicy (ablate.loop.policy)
    env: Any             # the world: its training tasks, and the judge of its episodes
    algorithm: Any       # ablate.algos.protocol.Algorithm
    step: int


def train_step(s: Step) -> dict:
    """One optimizer step: `collect` the scored rollouts (with dynamic-sampling refills),
    then `update` the policy on them (ablate.algos.protocol); the step's metrics row."""
    ts, tc = time.time(), time.process_time()   # wall, and this process's CPU (all threads)
    kept, row = collect(s)
    update(s, kept, row)
    row["step_s"] = time.time() - ts
    # CPU seconds the step cost, the async producer's rollout included: a cost that
    # neighbours on a shared machine do not inflate, unlike step_s (a vLLM engine's own
    # processes are not counted: with sampler=vllm it is the learner's side only)
    row["step_cpu_s"] = time.process_time() - tc + row.get("async/producer_cpu_s", 0.0)
    return row


def collect(s: Step) -> tuple[Refilled, dict]:
    """The step's rollouts, scored and shaped, over DAPO's refill rounds when enabled
    (ablate.algos.dynamic_sampling.refill): (the batch kept for training, the step's row
    of reward / accuracy / token figures over every episode rolled out)."""
    cfg = s.cfg
    t, ds = cfg.trainer, cfg.algo.dynamic_sampling
    tally, ts = Tally(), time.time()

    def rollout_round(round_: int, need: int) -> tuple[list, torch.Tensor, list]:
        tasks = sample_step_tasks(split_tasks(s.env, "train"), need, cfg.seed, s.step, round_,
                                  s.algorithm.experience)   # curriculum / buffer, or None
        episodes, scored, staleness = rollout(s, tasks, round_)
        tally.add(episodes, scored, staleness)
        # DAPO eq. 13 overlong penalty joins the task reward (a no-op unless enabled)
        rewards = s.algorithm.shape_rewards([r for r, _ in scored], episodes)
        return episodes, rewards, [e.group for e in episodes]

    kept = refill(t.tasks_per_step, ds.max_batches, ds.enable, rollout_round)
    row = tally.row(s.step, torch.cat(kept.seen), time.time() - ts, bool(cfg.harness.predict))
    row.update(kept.metrics)
    row["mixed_groups"] = mixed_groups(torch.cat(kept.seen), t.group_size)
    return kept, row


def rollout(s: Step, tasks: list, round_: int):
    """(episodes, [(reward, components)], {"async/staleness": ...}) of one round."""
    cfg, remote = s.cfg, s.policy.remote   # asynchronous rollouts (max_async_level > 0)
    if remote is not None:           # rolled out ahead, by older weights
        episodes, staleness = remote.take(s.step, tasks)
        return episodes, score(episodes, s.env, cfg.reward), staleness
    # (with several ranks: the tasks shared out, scored, gathered; ranks.py)
    episodes, scored = act_scored(s.policy, tasks, cfg.trainer.group_size, s.env, cfg.reward,
                                  temperature=cfg.sampler.temperature,
                                  seed=derived_seed(cfg.seed, s.step, round_))
    return episodes, scored, {"async/staleness": 0}


class Tally:
    """A step's rollout figures, summed over all its rounds (kept groups or not)."""

    def __init__(self):
        self.episodes, self.comps, self.staleness = [], {}, {"async/staleness": 0}
        self.correct = self.answered = self.generated = 0
        self.encoded = 0.0                   # tokens the sampler fed through the model

    def add(self, episodes: list, scored: list, staleness: dict) -> None:
        self.episodes += episodes
        for _, comps in scored:
            for k, v in comps.items():
                self.comps[k] = self.comps.get(k, 0.0) + float(v)
        self.correct += sum(bool(e.correct) for e in episodes)
        self.answered += sum(e.answered for e in episodes)
        self.generated += sum(e.env_metrics.get("agent_tokens", e.response_tokens)
                              for e in episodes)   # an agent's search / reflections included
        self.encoded += sum(e.encoded_tokens for e in episodes)
        self.staleness = staleness           # the last round's

    def row(self, step: int, rewards: torch.Tensor, rollout_s: float, predict: bool) -> dict:
        n = max(len(self.episodes), 1)
        row = {"step": step, "reward/mean": float(rewards.mean()),
               "reward/std": float(rewards.std()) if len(rewards) > 1 else 0.0,
               "accuracy": self.correct / n, "answered": self.answered / n,
               "episodes": len(self.episodes), "generated_tokens": self.generated,
               "rollout_s": rollout_s, "sampler/encoded_tokens": self.encoded,
               **self.staleness}
        row.update({f"reward/{k}": v / n for k, v in self.comps.items()})
        row.update(harness_step_metrics(self.episodes, predict))
        return row


def mixed_groups(rewards: torch.Tensor, group_size: int) -> float:
    """Fraction of groups with any reward variance: how much GRPO signal the step carries
    (DAPO's keep test, Yu et al. 2025, arXiv:2503.14476 §3.2)."""
    mixed, _ = dynamic_sampling_filter(rewards, [i // group_size for i in range(len(rewards))])
    return len(mixed) / max(len(rewards) // group_size, 1)


def update(s: Step, kept: Refilled, row: dict) -> None:
    """The algorithm's hooks on the kept batch (experience, then augment), its training
    batch and loss, the learner's update, the new weights pushed; metrics into `row`."""
    eps, rewards, groups = kept.items, kept.rewards, kept.groups
    if s.algorithm.experience is not None:   # curriculum / trajectory buffer
        eps, rewards, groups = s.algorithm.experience.after_rollout(s.step, eps, rewards,
                                                                    groups, row)
    if eps:   # RFT/STaR filter, DPO pairs (ablate.algos); AlgorithmBase's changes nothing
        eps, rewards, groups = augment(s, eps, rewards, groups, row)
    tu = time.time()
    if eps:
        learn(s, eps, rewards, groups, row)
    else:
        row["update/skipped"] = 1.0  # no group with differing rewards: no signal this step
    row["update_s"] = time.time() - tu


def augment(s: Step, eps, rewards, groups, row):
    """The algorithm's hook between scoring and `prepare` (ablate.algos.protocol)."""
    cfg, policy = s.cfg, s.policy
    ctx = StepContext(s.step, cfg.trainer.group_size,
                      score=lambda e: score(e, s.env, cfg.reward),
                      act=lambda tasks, n: policy.act(
                          tasks, n, temperature=cfg.sampler.temperature,
                          seed=derived_seed(cfg.seed, s.step, 7919)),
                      cfg=cfg, tokenizer=getattr(policy, "tokenizer", None), env=s.env)
    eps, rewards, groups, metrics = s.algorithm.augment(eps, rewards, groups, ctx)
    row["generated_tokens"] += int(metrics.pop("generated_tokens", 0))
    row.update(metrics)
    return eps, rewards, groups


def learn(s: Step, eps, rewards, groups, row: dict) -> None:
    """algorithm.prepare -> loss_fn, `algo.ppo_epochs` passes of learner.update over the
    batch, then the new weights to the sampler."""
    cfg, policy, algorithm = s.cfg, s.policy, s.algorithm
    batch = algorithm.prepare(eps, rewards, groups, policy.learner)
    row.update(batch.metrics)
    loss_fn = algorithm.loss_fn(batch)
    policy.sampler.yield_memory()   # vLLM on the learner's GPU sleeps until the push
    for epoch in range(cfg.algo.ppo_epochs):
        stats = policy.learner.update(batch.segments, batch.advantages, loss_fn,
                                      **learner_rows(batch, loss_fn))
    row.update({f"update/{k}": v for k, v in stats.items()})
    row.update(policy.push_weights(s.step))


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

