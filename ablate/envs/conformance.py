"""Protocol conformance of an environment, checked by preflight before any cell directory
exists: the class is complete, its answer tool is one of its tools, a tool written as a
method takes its schema's arguments, each split names each task once and is the same
when the world is built again, and one episode of its scripted baseline (or, without
one, a call of its answer tool) plays through `Environment.call` from a state `reset`
made, with ToolResults whose observations are text, no call raising inside the world,
and a mask on every turn it reaches that allows some of its tools. Every failure is one
EnvError line naming the environment, the method or tool, and what was expected."""
from __future__ import annotations

import inspect
import logging
import random
from contextlib import contextmanager
from typing import Any, Callable, Optional

import numpy as np
import torch

from ablate.harness.masking import Maskable, mask_context
from ablate.protocol.environment import (EnvError, Environment, log as env_log, quote,
                                         split_tasks, tool_names)
from ablate.protocol.task import Task
from ablate.protocol.trajectory import Trajectory, baseline_policy, run_episode

PLACEHOLDER = {"string": "", "integer": 0, "number": 0, "boolean": False, "array": [],
               "object": {}}


def check_class(cls: type[Environment], label: str) -> None:
    """Before building: every abstract protocol method is implemented."""
    missing = sorted(getattr(cls, "__abstractmethods__", ()))
    if inspect.isabstract(cls) and missing:
        raise EnvError(f"env={label}: {cls.__name__} lacks the protocol method(s) "
                       f"{', '.join(missing)}; expected them as in ablate.envs.Environment")


def check_tools(env: Environment, label: str) -> None:
    names = protocol(label, "tool_schemas", lambda: tool_names(env))
    if not env.answer_tool:
        raise EnvError(f"env={label}: answer_tool is not set; expected the name of the tool "
                       f"that ends the episode, one of {', '.join(names)}")
    if env.answer_tool not in names:
        raise EnvError(f"env={label}: answer_tool={env.answer_tool!r} is none of its tools; "
                       f"expected one of {', '.join(names)}")
    check_tool_names(names, env.answer_tool, label)
    for name in names:
        check_signature(env, name, label)
    prompt = protocol(label, "system_prompt", env.system_prompt)
    if not isinstance(prompt, str):
        raise EnvError(f"env={label}: system_prompt() returned a {type(prompt).__name__}; "
                       "expected a str")


def check_tool_names(names: tuple[str, ...], answer_tool: str, label: str) -> None:
    """Each tool name once, and none that reads as the answer tool written otherwise
    (case, `-` or `_`): the model calls a tool by its name, so a second tool of that
    name, or one only a case apart, is never the one it meant (or always)."""
    seen: dict[str, str] = {}
    for name in names:
        key = _plain(name)
        if key not in seen:
            seen[key] = name
            continue
        if answer_tool in (name, seen[key]):
            other = seen[key] if name == answer_tool else name
            what = "a second tool" if other == answer_tool else "tool"
            raise EnvError(f"env={label}: {what} {other!r} shadows the answer tool "
                           f"{answer_tool!r} (tool names match without case, '-' and '_'); "
                           "expected every other tool named apart from it")
        raise EnvError(f"env={label}: two tools are named {name!r}"
                       + (f" and {seen[key]!r}" if name != seen[key] else "")
                       + f"; expected each tool name once in tool_schemas() ({', '.join(names)})")


def _plain(name: str) -> str:
    return name.casefold().replace("-", "").replace("_", "").strip()


def check_signature(env: Environment, tool: str, label: str) -> None:
    """A tool written as a method of the world under the tool's name (step calling
    `getattr(self, name)(state, **arguments)`, the layout of TRL's environment_factory
    tools) takes every argument its schema names, and its schema names every parameter
    it needs beyond the first (the state)."""
    fn = tool_method(env, tool)
    try:
        params = inspect.signature(fn).parameters if fn is not None else {}
    except (TypeError, ValueError):      # a builtin without a signature: nothing to read
        return
    if not params or any(p.kind is p.VAR_KEYWORD for p in params.values()):
        return
    schema = env._params(tool)
    where = f"{type(env).__name__}.{tool}({', '.join(params)})"
    extra = [k for k in schema if k not in params]
    needed = [k for i, (k, p) in enumerate(params.items()) if p.default is p.empty
              and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY) and k not in schema
              and not (i == 0 and p.kind is p.POSITIONAL_OR_KEYWORD)]
    if extra or needed:
        what = (f"names argument(s) {', '.join(map(repr, extra))}, which {where} does not "
                "take") if extra else f"lacks {', '.join(map(repr, needed))}, which {where} needs"
        raise EnvError(f"env={label}: tool {tool}'s schema {what}; expected the schema's "
                       "properties to be the method's parameters (rename one to match)")


def tool_method(env: Environment, tool: str) -> Optional[Callable]:
    """The world's own method named like `tool` (none of the protocol's), or None."""
    if not tool.isidentifier() or hasattr(Environment, tool):
        return None
    fn = getattr(env, tool, None)
    return fn if callable(fn) and not isinstance(fn, type) else None


IMMUTABLE = (type(None), str, bytes, int, float, complex, bool, tuple, frozenset)


def check_state(state: Any, label: str) -> None:
    """reset() returns the episode's state, a thing step() can change."""
    if type(state) in IMMUTABLE:
        shown = "None" if state is None else f"a {type(state).__name__} ({quote(state, 40)})"
        raise EnvError(f"env={label}: reset() returned {shown}; expected the episode's state, "
                       "an object step() changes (a dataclass, a dict or a list; {} for a "
                       "world without state)")


def play_one(env: Environment, label: str, max_turns: int,
             on_turn: Optional[Callable[[Any, int], None]] = None) -> tuple[Trajectory, Any]:
    """One episode of the first task (train split) by its baseline or the no-op policy,
    `on_turn(state, turn)` before each call; (trajectory, the state after reset, for
    mask_candidates)."""
    tasks = protocol(label, "tasks", lambda: env.tasks("train"))
    if not tasks:
        raise EnvError(f"env={label}: tasks('train') is empty; expected at least one Task")
    task = tasks[0]
    state = protocol(label, "reset", lambda: env.reset(task))
    check_state(state, label)
    policy = protocol(label, "baseline", lambda: baseline_policy(env, task, seed=0)) or no_op(env)
    with unlogged():
        traj = protocol(label, "an episode", lambda: run_episode(env, task, policy, max_turns,
                                                                 on_turn))
    check_internal(traj, label)
    metrics = protocol(label, "behaviour", lambda: env.behaviour(task, traj.results))
    if not isinstance(metrics, dict):
        raise EnvError(f"env={label}: behaviour() returned a {type(metrics).__name__}; "
                       "expected a dict of JSON scalars")
    return traj, state


@contextmanager
def unlogged():
    """Environment.call's log of a raising tool (its traceback) off: check_internal says
    it in one line."""
    was, env_log.disabled = env_log.disabled, True
    try:
        yield
    finally:
        env_log.disabled = was


def check_internal(traj: Trajectory, label: str) -> None:
    """No call of the conformance episode raised inside the world (Environment.call turns
    that into an `internal:` error, which the model reads as "Error: <tool> failed
    inside the environment.")."""
    for r in traj.results:
        if (r.error or "").startswith("internal:"):
            raise EnvError(f"env={label}: tool {r.name} raised on the conformance episode's "
                           f"call {quote(r.arguments, 80)} ({r.error[len('internal:'):].strip()}"
                           "); expected step() to return a ToolResult, with error set for "
                           "bad input")


def mask_watch(env: Environment, label: str, **options) -> Optional[Callable[[Any, int], None]]:
    """For a Maskable world, an on_turn that checks each reached turn's `tool_names`:
    absent or None allows every tool; a list must name some of the world's tools (an
    empty one would be read as no limit, ablate/harness/rollout.py)."""
    if not isinstance(env, Maskable):
        return None
    names = tool_names(env)

    def watch(state: Any, turn: int) -> None:
        ctx = protocol(label, "mask_candidates", lambda: mask_context(env, state, turn, **options))
        allowed = ctx.get("tool_names")
        if allowed is None:
            return
        if len(allowed) == 0:
            raise EnvError(f"env={label}: mask_candidates() allows no tool on turn {turn + 1} "
                           "of the conformance episode (tool_names: []); expected at least "
                           "one of its tools (None or no tool_names: every tool)")
        unknown = [n for n in allowed if n not in names]
        if unknown:
            raise EnvError(f"env={label}: mask_candidates() allows {unknown[0]!r} on turn "
                           f"{turn + 1}, none of its tools; expected names among "
                           f"{', '.join(names)}")
        warn_free_value(env, label, ctx, allowed, turn)
    return watch


_WARNED: set = set()      # (world, tool, key) warned of in this process


def warn_free_value(env: Environment, label: str, ctx: dict, allowed, turn: int) -> None:
    """A tool allowed on this turn whose argument takes the `ids` (or `answers`) while
    that list is empty: an empty list constrains nothing (ablate/harness/masking.py,
    ActionMask), so the model writes that value free. Said once per (world, tool, key)."""
    grammar = ctx.get("grammar") or {}
    for kind, key in (("ids", grammar.get("id_key")), ("answers", grammar.get("answer_key"))):
        if not key or ctx.get(kind) != []:
            continue
        for tool in allowed:
            if key in env._params(tool) and (label, tool, key) not in _WARNED:
                _WARNED.add((label, tool, key))
                logging.getLogger("ablate").warning(
                    "env=%s: mask_candidates() allows %s on turn %d with %s: [], so its "
                    "argument %r is not masked (an empty list constrains nothing); leave %s "
                    "out of tool_names until there are %s (docs/environments.md, \"Action "
                    "masking\")", label, tool, turn + 1, kind, key, tool, kind)


def check_splits(env: Environment, label: str) -> None:
    """Each split names each task once, and no held-out task is a train task (the same
    Task.identity: prompt and answer, or the world's own key): a test question the agent
    trained on measures memory."""
    for split in ("train", "test"):
        check_ids(protocol(label, "tasks", lambda: split_tasks(env, split)), split, label)
    train = {t.identity: t.id for t in protocol(label, "tasks", lambda: split_tasks(env, "train"))}
    for task in protocol(label, "tasks", lambda: split_tasks(env, "test")):
        if task.identity in train:
            same = f"key {task.key!r}" if task.key else "prompt and answer"
            raise EnvError(f"env={label}: test task {task.id!r} is train task "
                           f"{train[task.identity]!r} (the same {same}); expected a "
                           "held-out test split that shares no task with train")


def no_op(env: Environment) -> Callable:
    """A policy that calls the answer tool once with placeholder arguments."""
    schema = env._schema(env.answer_tool)
    props = schema.get("properties", {})
    args = {k: PLACEHOLDER.get(props.get(k, {}).get("type"), "")
            for k in schema.get("required", ())}
    return lambda results: None if results else (env.answer_tool, args)


def protocol(label: str, what: str, fn: Callable):
    """fn() with an exception (a bug of the environment) as one EnvError line."""
    try:
        return fn()
    except EnvError:
        raise
    except Exception as exc:
        text = str(exc).splitlines()[0] if str(exc) else ""
        raise EnvError(f"env={label}: {what} raised {type(exc).__name__}: {text}") from None



def check_ids(tasks: list[Task], split: str, label: str) -> None:
    """Each task id once: the rows, the seeds' pairing and the analysis key on it."""
    seen: dict[str, int] = {}
    for i, task in enumerate(tasks):
        if task.id in seen:
            raise EnvError(f"env={label}: tasks({split!r}) holds the id {task.id!r} twice "
                           f"(tasks {seen[task.id]} and {i}); expected each task id once in "
                           "a split")
        seen[task.id] = i


def check_rebuilt(env: Environment, build: Callable[[], Environment], label: str) -> None:
    """The world built again, as another seed of a grid builds it (`build`: the run's
    seed changed; the global random generators moved, as the cell's seed_everything
    moves them), has the same splits: the analysis pairs seeds by task id, and a
    generator on the global `random` asks each seed other questions under the same ids."""
    with other_global_rng(1):
        again = protocol(label, "building it again", build)
    try:
        for split in ("train", "test"):
            with other_global_rng(2):
                b = protocol(label, "tasks", lambda: again.tasks(split))
            diff = difference(split_tasks(env, split), b)
            if diff:
                raise EnvError(f"env={label}: tasks({split!r}) differs when the world is built "
                               f"again for another seed ({diff}); expected the same splits "
                               "for every seed (seeds are paired by task id): draw them from "
                               "a generator of its own, random.Random(<an env key>), not the "
                               "global random module or the run's seed")
    finally:
        again.close()


def check_seeded(a: Environment, b: Environment, label: str, key: str, values) -> None:
    """A world whose declared seed_key (ablate/envs/registry.py) changes no task."""
    if all(not difference(split_tasks(a, s), split_tasks(b, s)) for s in ("train", "test")):
        raise EnvError(f"env={label}: its tasks are the same under {key}={values[0]!r} and "
                       f"{values[1]!r}; expected its declared seed_key={key.split('.')[-1]!r} "
                       "to draw the tasks (read it where they are drawn, or declare none)")


def difference(a: list[Task], b: list[Task]) -> str:
    """The first difference of two splits, in words; "" for none."""
    if len(a) != len(b):
        return f"{len(a)} vs {len(b)} tasks"
    for x, y in zip(a, b):
        if (x.id, x.identity) != (y.id, y.identity):
            what = (f"{x.id!r} vs {y.id!r}" if x.id != y.id else
                    f"{quote(x.prompt, 50)} vs {quote(y.prompt, 50)}")
            return f"task {x.id!r}: {what}"
    return ""


@contextmanager
def other_global_rng(seed: int):
    """random, numpy and torch's (CPU) global generators at `seed`, then as they were."""
    saved = random.getstate(), np.random.get_state(), torch.get_rng_state()
    random.seed(seed)
    np.random.seed(seed)
    torch.default_generator.manual_seed(seed)
    try:
        yield
    finally:
        random.setstate(saved[0])
        np.random.set_state(saved[1])
        torch.set_rng_state(saved[2])
