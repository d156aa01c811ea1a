"""Protocol conformance of an environment, checked by preflight before any cell directory
exists: the class is complete, its answer tool is one of its tools, and one episode of its
scripted baseline (or, without one, a call of its answer tool) plays through
`Environment.call` with ToolResults whose observations are text. Every failure is one
EnvError line naming the environment, the method or tool, and what was expected."""
from __future__ import annotations

import inspect
from typing import Any, Callable

from ablate.protocol.environment import EnvError, Environment, split_tasks, tool_names
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


def play_one(env: Environment, label: str, max_turns: int) -> tuple[Trajectory, Any]:
    """One episode of the first task (train split) by its baseline or the no-op policy;
    (trajectory, the state after reset, for mask_candidates)."""
    tasks = protocol(label, "tasks", lambda: env.tasks("train"))
    if not tasks:
        raise EnvError(f"env={label}: tasks('train') is empty; expected at least one Task")
    task = tasks[0]
    policy = protocol(label, "baseline", lambda: baseline_policy(env, task, seed=0)) or no_op(env)
    traj = protocol(label, "an episode", lambda: run_episode(env, task, policy, max_turns))
    metrics = protocol(label, "behaviour", lambda: env.behaviour(task, traj.results))
    if not isinstance(metrics, dict):
        raise EnvError(f"env={label}: behaviour() returned a {type(metrics).__name__}; "
                       "expected a dict of JSON scalars")
    return traj, protocol(label, "reset", lambda: env.reset(task))


def check_splits(env: Environment, label: str) -> None:
    """No held-out task is a train task (the same Task.identity: prompt and answer, or
    the world's own key): a test question the agent trained on measures memory."""
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

