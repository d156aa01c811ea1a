"""LATS: Monte-Carlo tree search over an agent's tool-call steps (Zhou et al., 2024,
"Language Agent Tree Search", arXiv:2310.04406, §4).

One tree per (task, sample). A node is an episode prefix (the turns that lead to it); the
root is the task's first prompt. Each iteration (§4, "Selection" to "Backpropagation"):

* selection: from the root, descend to the child maximising UCT (eq. 1),
  V(s)/N(s) + c·sqrt(ln N(parent) / N(s)), among children that can still be expanded,
  down to a node not expanded yet;
* expansion: sample k = `children` candidate next turns at that node (fewer when the node
  budget is nearly spent); each is a new node;
* evaluation and simulation: each candidate's episode is continued to its end by the
  policy (the same rollout samples the candidate and completes it), and the node's value
  is that episode's reward (`value=rollout`: the cell's reward scheme, judge included) or
  the policy's own estimate (`value=policy`: the policy, shown the episode, rates its
  answer 0-10, §4 "Evaluation"; no judge; an episode without an answer is worth 0);
* backpropagation: the reward is added to every node on the path to the root.

A node whose turn ended its episode is terminal. The search stops when the tree holds
`node_budget` nodes besides the root, when no node can be expanded, or (with
`stop_on_success`) at the first judged-correct episode (`value=policy`: the first rated
10/10). The agent's episode for the (task, sample) is the highest-value episode the
search produced (the first on ties), a real rollout whose tokens and log-probabilities
are as sampled, so it can be trained on (`train_episodes=siblings`: all of them, grouped
by the node they grew from). With node_budget 1 the search is one rollout from the root:
single-sample behaviour. Branching is deterministic replay of the node's turns
(ablate/agents/replay.py).

With `value=rollout` the search uses the judge, so LATS's accuracy is that of a search
with outcome feedback, as the paper's on HotPotQA; `value=policy` searches without it.
Its compute (`agent_tokens`: every token its rollouts and ratings generated) is reported
beside its accuracy (docs/agents.md).
"""
from __future__ import annotations

import itertools
import math
import re
from dataclasses import dataclass, field
from typing import Any, Optional

from ablate.core.seeding import derived_seed
from ablate.agents.base import Agent, run_rollout, stop_ids
from ablate.agents.reflexion import episode_prompt
from ablate.agents.registry import AGENTS
from ablate.agents.replay import Action, ReplaySampler, turn_actions

VALUES = ("rollout", "policy")
RATE_ASK = ("How likely is the final answer of this attempt to be correct? Reply with one "
            "integer from 0 (surely wrong) to 10 (surely right).")
RATE_SYSTEM = "You grade an attempt of an agent that used tools to answer a question."


class ReplayError(RuntimeError):
    """Replaying a node's turns did not reproduce them (a non-deterministic environment)."""


@dataclass(eq=False)
class Node:
    action: Optional[Action] = None          # the turn that leads here (None: the root)
    parent: Optional["Node"] = None
    children: list = field(default_factory=list)
    visits: int = 0
    value_sum: float = 0.0
    terminal: bool = False

    @property
    def depth(self) -> int:
        return 0 if self.parent is None else self.parent.depth + 1

    def path(self) -> list[Action]:
        return [] if self.parent is None else self.parent.path() + [self.action]

    def expandable(self) -> bool:
        return not self.terminal and (not self.children or
                                      any(c.expandable() for c in self.children))

    def uct(self, c: float) -> float:
        # Zhou et al., 2024, §4 eq. 1: V(s)/N(s) + w·sqrt(ln N(p) / N(s))
        return self.value_sum / self.visits + c * math.sqrt(
            math.log(self.parent.visits) / self.visits)

    def shape(self) -> tuple:
        """The tree as nested tuples (action ids, visits, value, terminal, children)."""
        return (self.action.ids if self.action else (), self.visits,
                round(self.value_sum, 9), self.terminal,
                tuple(c.shape() for c in self.children))


@dataclass(eq=False)
class Tree:
    task: Any
    group: int
    sample: int
    root: Node = field(default_factory=Node)
    # (value, episode, leaf) of every rollout; the leaf it grew from replayed leaf.depth turns
    episodes: list = field(default_factory=list)
    tokens: int = 0                                  # tokens its rollouts really generated
    done: bool = False

    @property
    def size(self) -> int:
        """Nodes besides the root."""
        def count(n: Node) -> int:
            return len(n.children) + sum(count(c) for c in n.children)
        return count(self.root)

    def select(self, c: float) -> Optional[Node]:
        node = self.root
        while node.children:
            open_ = [ch for ch in node.children if ch.expandable()]
            if not open_:
                return None
            node = max(open_, key=lambda ch: ch.uct(c))   # first of equals: max is stable
        return node if node.expandable() else None


def backpropagate(node: Node, value: float) -> None:
    while node is not None:
        node.visits += 1
        node.value_sum += value
        node = node.parent


@AGENTS.register("lats")
class LATS(Agent):
    name = "lats"

    def __init__(self, *, node_budget: int = 8, children: int = 2, exploration: float = 1.0,
                 stop_on_success: bool = True, value: str = "rollout",
                 rating_tokens: int = 8, train_episodes: str = "best"):
        if value not in VALUES:
            raise ValueError(f"agent.lats.value={value!r} is not one of {list(VALUES)}")
        self.node_budget, self.children = int(node_budget), int(children)
        self.exploration, self.stop_on_success = float(exploration), bool(stop_on_success)
        self.value, self.rating_tokens = value, int(rating_tokens)
        self.train_episodes = train_episodes
        self.training = False       # set by agent_for: this agent makes training rollouts

    @classmethod
    def from_config(cls, agent_cfg) -> "LATS":
        t = agent_cfg.lats
        return cls(node_budget=t.node_budget, children=t.children,
                   exploration=t.exploration, stop_on_success=t.stop_on_success,
                   value=t.value, rating_tokens=t.rating_tokens,
                   train_episodes=t.train_episodes)

    def act(self, policy, tasks, group_size, *, temperature, seed, score):
        trees = self.search(policy, tasks, group_size, temperature=temperature, seed=seed,
                            score=score)
        if self.training and self.train_episodes == "siblings":
            return siblings(trees)
        return [self.best(t) for t in trees]

    def search(self, policy, tasks, group_size, *, temperature, seed, score) -> list[Tree]:
        """The trees of every (task, sample), in (task, sample) order."""
        trees = [Tree(task, i, s) for i, task in enumerate(tasks) for s in range(group_size)]
        for round_ in itertools.count():   # each round adds a node or closes a leaf
            wanted = []
            for t in trees:
                leaf = None if t.done else t.select(self.exploration)
                if leaf is None:
                    t.done = True
                    continue
                wanted.append((t, leaf, min(self.children, self.node_budget - t.size)))
            if not wanted:
                break
            for b, batch in enumerate(batches(wanted)):
                # the first call of a search is a plain rollout with the caller's seed
                s = seed if round_ == b == 0 else derived_seed(seed, round_, b)
                self.expand(policy, batch, temperature, s, score)
            for t in trees:
                t.done = t.done or t.size >= self.node_budget
        return trees

    def expand(self, policy, batch, temperature, seed, score) -> None:
        """One rollout call for a batch of (tree, leaf, n): n candidates per leaf, each
        continued to its end and valued (`value`)."""
        actions = [a for _, leaf, _ in batch for a in leaf.path()]
        tasks = [t.task for t, _, n in batch for _ in range(n)]
        episodes = run_rollout(policy, tasks, 1, temperature=temperature, seed=seed,
                               sampler=ReplaySampler(policy.sampler, actions))
        if self.value == "rollout":
            values, spent = [float(r) for r, _ in score(episodes)], [0] * len(episodes)
        else:
            values, spent = self.rate(policy, episodes, temperature, derived_seed(seed, 1))
        it = iter(zip(episodes, values, spent))
        for tree, leaf, n in batch:
            for _ in range(n):
                episode, value, rated = next(it)
                tree.tokens += rated
                self.grow(tree, leaf, episode, value)

    def rate(self, policy, episodes, temperature, seed) -> tuple[list[float], list[int]]:
        """The policy's own value of each episode: its 0-10 rating of the answer, / 10
        (0 without an answer, or when no integer can be read); and the tokens spent."""
        todo = [i for i, e in enumerate(episodes) if e.answered]
        values, spent = [0.0] * len(episodes), [0] * len(episodes)
        if not todo:
            return values, spent
        prompts = [episode_prompt(policy, episodes[i], RATE_SYSTEM, RATE_ASK) for i in todo]
        cap = getattr(policy.sampler, "max_context", None)
        outs = policy.sampler.generate(
            prompts, max_new_tokens=[max(1, min(self.rating_tokens, cap - len(p)))
                                     if cap else self.rating_tokens for p in prompts],
            temperature=temperature, top_p=policy.cfg.sampler.top_p,
            stop_token_ids=stop_ids(policy), seed=seed)
        for i, o in zip(todo, outs):
            found = re.search(r"\d+", policy.tokenizer.decode(list(o.ids),
                                                            skip_special_tokens=True))
            values[i] = min(int(found.group()), 10) / 10 if found else 0.0
            spent[i] = len(o.ids)
        return values, spent

    def grow(self, tree: Tree, leaf: Node, episode, value: float) -> None:
        path, d = leaf.path(), leaf.depth
        turns = turn_actions(episode)
        if [a.ids for a in turns[:d]] != [a.ids for a in path]:
            raise ReplayError(f"agent=lats: replaying task {tree.task.id} did not reproduce "
                              f"its first {d} turns: the environment is not deterministic "
                              "under reset + step")
        tree.tokens += episode.response_tokens - sum(len(a.ids) for a in path)
        tree.episodes.append((value, episode, leaf))
        if len(turns) <= d:            # the episode ended before acting at this node
            leaf.terminal = True
            backpropagate(leaf, value)
        else:
            child = Node(action=turns[d], parent=leaf,
                         terminal=episode.num_turns == d + 1)
            leaf.children.append(child)
            backpropagate(child, value)
        done = episode.correct if self.value == "rollout" else value >= 1.0
        if self.stop_on_success and done:
            tree.done = True

    @staticmethod
    def best(tree: Tree):
        top = max(r for r, _, _ in tree.episodes)
        episode = next(e for r, e, _ in tree.episodes if r == top)
        episode.group, episode.sample = tree.group, tree.sample
        depth = max((n.depth for n in nodes(tree.root)), default=0)
        episode.env_metrics.update({"agent_tokens": tree.tokens, "lats_nodes": tree.size,
                                    "lats_rollouts": len(tree.episodes),
                                    "lats_depth": depth})
        return episode


def siblings(trees: list[Tree]) -> list:
    """Every rollout of every tree, grouped by the leaf it grew from: the episodes of a
    group share their replayed prefix and differ from the next turn on (Agent Q's node
    pairs, Putta et al., 2024, arXiv:2408.07199, §4). `agent_tokens`: each episode's
    own new tokens, the tree's ratings on its first."""
    out, group_of = [], {}
    for tree in trees:
        first = len(out)
        for _, e, leaf in tree.episodes:
            e.group = group_of.setdefault(id(leaf), len(group_of))
            e.sample = sum(1 for x in out if x.group == e.group)
            e.env_metrics["agent_tokens"] = e.response_tokens - sum(
                len(a.ids) for a in leaf.path())
            out.append(e)
        rest = tree.tokens - sum(e.env_metrics["agent_tokens"] for e in out[first:])
        out[first].env_metrics["agent_tokens"] += rest
    return out


def nodes(root: Node):
    yield root
    for c in root.children:
        yield from nodes(c)


def batches(wanted: list) -> list[list]:
    """Split (tree, leaf, n) into rollout calls in which no two trees share a first
    prompt (the replaying sampler keys recorded turns by prompt, so two trees of one task
    on different paths must not share a call)."""
    out: list[tuple[set, list]] = []
    for item in wanted:
        key = item[0].task.prompt
        for seen, batch in out:
            if key not in seen:
                seen.add(key)
                batch.append(item)
                break
        else:
            out.append(({key}, [item]))
    return [b for _, b in out]
