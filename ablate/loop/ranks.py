"""The cell's roles across ranks (torchrun / deepspeed launcher; docs/distributed.md).

    rollout workers  every rank rolls out a contiguous share of the step's tasks (a GRPO
                     group stays on one rank), scores it (the judge runs once per episode)
                     and the scored episodes are gathered, in task order, on every rank;
    algorithm        every rank then runs the same scoring -> advantages -> batch code on
                     the same global episodes (so group- and batch-level statistics, dynamic
                     sampling and the metrics row are those of one process);
    learner group    one ZeRO-3 engine over all ranks; each rank forwards and backwards the
                     segments of its own groups (`shard_rows`), loss normalisers global;
    writer           rank 0 alone writes the cell directory; the others read it.

With one rank every function here is the single-process code path unchanged."""
from __future__ import annotations

from ablate.core import dist
from ablate.core.seeding import derived_seed
from ablate.loop.policy import eval_episodes
from ablate.loop.scoring import score

RANK_SEED = 104729   # mixes the rank into a rollout seed (ranks > 0 only)


def act_scored(policy, tasks, group_size, judge, reward_cfg, *, temperature, seed,
               evaluation=False):
    """(episodes, [(reward, components)]) of `group_size` rollouts per task, the tasks
    shared out between the ranks and the results gathered in task order on every rank."""
    def run(share, r):
        eps = policy.act(share, group_size, temperature=temperature,
                         seed=rank_seed(seed, r), evaluation=evaluation)
        return [(eps, score(eps, judge, reward_cfg))]
    return _sharded(tasks, run)[0]


def eval_scored(policy, tasks, samples, judge, reward_cfg, *, temperature, greedy, seed,
                greedy_seed):
    """An evaluation's ((episodes, scored), (greedy episodes, scored)) (policy.py's
    eval_episodes: one merged rollout where the sampler can), shared out like act_scored."""
    def run(share, r):
        eps, g_eps = eval_episodes(policy, share, samples, temperature=temperature,
                                   greedy=greedy, seed=rank_seed(seed, r),
                                   greedy_seed=rank_seed(greedy_seed, r))
        return [(eps, score(eps, judge, reward_cfg)),
                (g_eps, score(g_eps, judge, reward_cfg) if g_eps else [])]
    return _sharded(tasks, run)


def rank_seed(seed: int, rank: int) -> int:
    """A rollout seed of rank `rank` (rank 0 keeps the one-process seed)."""
    return derived_seed(seed, RANK_SEED, rank) if rank else seed


def _sharded(tasks, run) -> list[tuple[list, list]]:
    """`run(tasks, rank) -> [(episodes, scored), ...]` on this rank's contiguous share of
    the tasks, each part gathered in task order on every rank."""
    world = dist.world_size()
    if world == 1:
        return run(tasks, 0)
    r = dist.rank()
    mine = dist.shard(len(tasks), r, world)
    parts = run(tasks[mine.start:mine.stop], r) if len(mine) else None
    for episodes, _ in parts or []:
        for e in episodes:
            e.group += mine.start   # the group id of the task in the whole step
            e.state = None          # the final world state served the judge; not sent
    gathered = dist.all_gather_object(parts)
    n = len(next(p for p in gathered if p is not None))
    return [([e for p in gathered if p for e in p[k][0]],
             [x for p in gathered if p for x in p[k][1]]) for k in range(n)]


def learner_rows(batch, loss_fn) -> dict:
    """The `rows=` keyword of learner.update for this rank ({} with one rank): whole
    units (an episode's segments; a loss's `pack_keys` unit such as a DPO pair, whose
    loss does not split over rows) in contiguous runs of about equal token counts. Any
    such split gives the one-rank update: the loss normalisers are global
    (ablate/learners/base.py)."""
    world = dist.world_size()
    if world == 1:
        return {}
    keys = getattr(loss_fn, "pack_keys", None)
    units = list(keys) if keys is not None else list(batch.episode_of)
    return {"rows": token_shard([len(s.ids) for s in batch.segments], units,
                                dist.rank(), world)}


def token_shard(lengths: list[int], units: list, rank: int, world: int) -> list[int]:
    """Rows of rank `rank`: units in first-seen order, each to the rank its token midpoint
    falls in (cumulative tokens / total x world), so shares are contiguous and balanced."""
    order: dict = {}
    for i, u in enumerate(units):
        order.setdefault(u, []).append(i)
    total = max(sum(lengths), 1)
    mine, done = [], 0
    for rows in order.values():
        size = sum(lengths[i] for i in rows)
        if min(int((done + size / 2) / total * world), world - 1) == rank:
            mine += rows
        done += size
    return sorted(mine)


class CellOutcome(RuntimeError):
    """Rank 0 could not start the cell (busy, config refused): the same error on every
    rank, so all of them stop with rank 0's one line."""


def agree(fn):
    """Run `fn()` on rank 0, broadcast its result (or its error) to every rank."""
    result, error = None, None
    if dist.is_writer():
        try:
            result = fn()
        except Exception as exc:   # re-raised below on rank 0; its text on the others
            error = exc
    sent = dist.broadcast_object(
        (result, None if error is None else (type(error).__name__, str(error))))
    if error is not None:
        raise error
    if sent[1] is not None:
        raise CellOutcome(f"rank 0: {sent[1][0]}: {sent[1][1]}")
    return sent[0]
