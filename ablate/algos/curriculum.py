"""Curriculum over task difficulty and a trajectory buffer (`algo.curriculum.*`,
`algo.buffer.*`), the state of a cell's training data beside its algorithm.

Curriculum (Bengio et al., 2009, "Curriculum learning", easy examples first): a step
draws its tasks only from those of difficulty at most `level` (`Task.difficulty`, in the
world's own word: EnronHop counts hops). `mode=schedule`: level = start_level +
⌊(step-1)/every⌋; `mode=promotion`: level starts at start_level and goes up by one when
the training accuracy of the last `window` steps averages at least `promote_at`. Logged: `curriculum/level`,
`curriculum/pool` (tasks drawable this step).

Trajectory buffer (experience replay, Lin, 1992; for group-relative RL of LLMs e.g.
RLEP, Zhang et al., 2025, arXiv:2507.07451): every judged-correct training episode is
stored (its token ids, loss masks and the sampler's log-probabilities, i.e. the behaviour
policy's), at most `capacity`, oldest dropped. A share `revisit` of each step's tasks is
drawn from the tasks the buffer holds, and a group with no correct episode gets up to
`replay` stored successes of its task appended (same group id, so a group-relative
advantage sees them). The replayed episodes are off-policy: their "old" log-probabilities
are the behaviour policy's, so the PPO ratio π_θ/π_behaviour is the importance weight
(clipped); `algo.rollout_correction` (e.g. token-tis) additionally recomputes π_old with
the learner and truncates π_old/π_behaviour (ablate.algos.correction). Logged:
`buffer/size`, `buffer/replayed`, `buffer/revisited`.

Both states are saved inside each learner checkpoint (ckpt/step_N/experience/step_N.pt), so a
resumed cell continues exactly."""
from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, Optional

import numpy as np
import torch

MODES = ("schedule", "promotion")


class Curriculum:
    def __init__(self, *, mode: str = "schedule", start_level: int = 1, every: int = 2,
                 promote_at: float = 0.5, window: int = 2):
        if mode not in MODES:
            raise ValueError(f"algo.curriculum.mode={mode!r} is not one of {list(MODES)}")
        if start_level < 1 or every < 1 or window < 1 or not 0 <= promote_at <= 1:
            raise ValueError("need algo.curriculum.start_level, every, window >= 1 and "
                             f"promote_at in [0, 1]; got {start_level}, {every}, {window}, "
                             f"{promote_at}")
        self.mode, self.start, self.every = mode, int(start_level), int(every)
        self.promote_at, self.window = float(promote_at), int(window)
        self.current, self.history = int(start_level), []

    def level(self, step: int) -> int:
        if self.mode == "schedule":
            return self.start + (step - 1) // self.every
        return self.current

    def pool(self, tasks: list, step: int) -> list:
        """Tasks of difficulty at most `level`; the easiest ones when none is that easy."""
        limit = max(self.level(step), min(t.difficulty for t in tasks))
        return [t for t in tasks if t.difficulty <= limit]

    def observe(self, accuracy: float) -> None:
        if self.mode != "promotion":
            return
        self.history.append(float(accuracy))
        recent = self.history[-self.window:]
        if len(recent) == self.window and np.mean(recent) >= self.promote_at:
            self.current += 1
            self.history = []

    def state_dict(self) -> dict:
        return {"current": self.current, "history": list(self.history)}

    def load_state_dict(self, s: dict) -> None:
        self.current, self.history = int(s["current"]), list(s["history"])


class TrajectoryBuffer:
    def __init__(self, *, capacity: int = 64, replay: int = 1, revisit: float = 0.5):
        if capacity < 1 or replay < 0 or not 0 <= revisit <= 1:
            raise ValueError(f"need algo.buffer.capacity >= 1, replay >= 0 and revisit in "
                             f"[0, 1]; got {capacity}, {replay}, {revisit}")
        self.capacity, self.replay, self.revisit = int(capacity), int(replay), float(revisit)
        self.items: list[tuple[Any, float]] = []   # (episode, reward), oldest first

    def store(self, episodes, rewards) -> None:
        r = torch.as_tensor(rewards, dtype=torch.float32).tolist()
        self.items += [(e, r[i]) for i, e in enumerate(episodes) if e.correct and e.segments]
        del self.items[: max(len(self.items) - self.capacity, 0)]

    def tasks(self) -> list:
        """The tasks with a stored success, in order of first storage."""
        return list({e.task.id: e.task for e, _ in self.items}.values())

    def replay_into(self, episodes, rewards, group_ids):
        """Stored successes appended to the groups with no correct episode."""
        r = torch.as_tensor(rewards, dtype=torch.float32).flatten()
        eps, rs, groups, n = list(episodes), r.tolist(), list(group_ids), 0
        for g in dict.fromkeys(group_ids):
            members = [e for e, h in zip(episodes, group_ids) if h == g]
            if any(e.correct for e in members):
                continue
            stored = [(e, x) for e, x in reversed(self.items) if e.task.id == members[0].task.id]
            for j, (e, x) in enumerate(stored[: self.replay]):
                eps.append(dataclasses.replace(e, group=members[0].group,
                                               sample=len(members) + j))
                rs.append(x)
                groups.append(g)
                n += 1
        return eps, torch.tensor(rs, dtype=torch.float32), groups, n


class Experience:
    """The curriculum and/or buffer of a cell (either may be None)."""

    def __init__(self, curriculum: Optional[Curriculum], buffer: Optional[TrajectoryBuffer],
                 propose=None):
        """`propose(tasks, rng) -> tasks` (optional) orders the drawable tasks, the ones
        to train on first (agent=voyager: near the solved ones); without it they are
        drawn uniformly."""
        self.curriculum, self.buffer, self.propose = curriculum, buffer, propose

    @classmethod
    def from_config(cls, algo_cfg) -> Optional["Experience"]:
        c, b = getattr(algo_cfg, "curriculum", None), getattr(algo_cfg, "buffer", None)
        cur = Curriculum(mode=str(c.mode), start_level=int(c.start_level), every=int(c.every),
                         promote_at=float(c.promote_at), window=int(c.window)) \
            if c is not None and c.enable else None
        buf = TrajectoryBuffer(capacity=int(b.capacity), replay=int(b.replay),
                               revisit=float(b.revisit)) if b is not None and b.enable else None
        return cls(cur, buf) if (cur or buf) else None

    def describe(self) -> dict:
        out = {}
        if self.curriculum:
            c = self.curriculum
            out["curriculum"] = {"mode": c.mode, "start_level": c.start, "every": c.every,
                                 "promote_at": c.promote_at, "window": c.window}
        if self.buffer:
            b = self.buffer
            out["buffer"] = {"capacity": b.capacity, "replay": b.replay, "revisit": b.revisit,
                             "correction": "PPO ratio vs the behaviour policy's logprobs "
                                           "(+ algo.rollout_correction)"}
        return out

    def sample(self, tasks: list, n: int, step: int, rng: np.random.Generator) -> list:
        """The step's tasks: a share `revisit` from the buffer's tasks, the rest from the
        curriculum's pool (without repeats)."""
        pool = self.curriculum.pool(tasks, step) if self.curriculum else list(tasks)
        chosen: list = []
        if self.buffer and self.buffer.items:
            stored = [t for t in self.buffer.tasks() if t in pool]
            k = min(int(round(self.buffer.revisit * n)), len(stored))
            chosen = [stored[i] for i in rng.choice(len(stored), size=k, replace=False)]
        rest = [t for t in pool if t not in chosen]
        self.last = {"pool": len(pool), "revisited": len(chosen)}
        if self.propose is not None:
            return chosen + list(self.propose(rest, rng))[: n - len(chosen)]
        idx = rng.choice(len(rest), size=min(n - len(chosen), len(rest)), replace=False)
        return chosen + [rest[i] for i in idx]

    def after_rollout(self, step: int, episodes, rewards, group_ids, row: dict):
        """Observe the step (promotion), replay stored successes, store new ones."""
        last = getattr(self, "last", {})
        if self.curriculum:
            row["curriculum/level"] = float(self.curriculum.level(step))
            row["curriculum/pool"] = float(last.get("pool", 0))
            self.curriculum.observe(row["accuracy"])   # every episode sampled this step
        if not self.buffer:
            return episodes, rewards, group_ids
        fresh = list(episodes)
        r0 = rewards
        episodes, rewards, group_ids, n = self.buffer.replay_into(episodes, rewards, group_ids)
        self.buffer.store(fresh, r0)
        row.update({"buffer/size": float(len(self.buffer.items)), "buffer/replayed": float(n),
                    "buffer/revisited": float(last.get("revisited", 0))})
        return episodes, rewards, group_ids

    # --- checkpoints -------------------------------------------------------------------
    def save(self, ckpt_dir, step: int) -> None:
        path = Path(ckpt_dir) / "experience" / f"step_{step:08d}.pt"
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        torch.save({"curriculum": self.curriculum.state_dict() if self.curriculum else None,
                    "buffer": self.buffer.items if self.buffer else None}, tmp)
        tmp.replace(path)

    def load(self, ckpt_dir, step: int) -> None:
        path = Path(ckpt_dir) / "experience" / f"step_{step:08d}.pt"
        if not path.exists():
            raise FileNotFoundError(f"{path}: the curriculum/buffer state of the step-{step} "
                                    "checkpoint is missing; cannot resume exactly")
        state = torch.load(path, weights_only=False)
        if self.curriculum:
            self.curriculum.load_state_dict(state["curriculum"])
        if self.buffer:
            self.buffer.items = list(state["buffer"])


class WithExperience:
    """An algorithm together with the cell's Experience: every attribute is the
    algorithm's (its `augment` too); describe/save/load cover both; `experience` is the
    protocol's hook (ablate.algos.protocol.Algorithm), here not None."""

    def __init__(self, algorithm, experience: Experience):
        self.algorithm, self.experience = algorithm, experience

    def __getattr__(self, name):
        return getattr(self.algorithm, name)

    def augment(self, episodes, rewards, group_ids, ctx):
        return self.algorithm.augment(episodes, rewards, group_ids, ctx)

    def describe(self) -> dict:
        return {**self.algorithm.describe(), **self.experience.describe()}

    def save(self, ckpt_dir, step: int) -> None:
        self.algorithm.save(ckpt_dir, step)
        self.experience.save(ckpt_dir, step)

    def load(self, ckpt_dir, step: int) -> None:
        self.algorithm.load(ckpt_dir, step)
        self.experience.load(ckpt_dir, step)
