"""`env=verifiers`: a verifiers v1 taskset (verifiers==0.4.0, `verifiers.v1`) as an ablate
environment. The ONE module that touches verifiers' API (it moves fast): everything it
uses is exercised by tests/envs/test_envs_verifiers.py::test_conformance_of_the_verifiers_api.

ablate's own harness and sampler drive the episode (so the learner trains on the ids the
sampler produced, never on re-tokenised messages); the taskset supplies the rest:

- Taskset: `env.taskset=pkg.module:Class` (a `vf.Taskset` subclass) or an installed
  taskset id (verifiers' loader, `verifiers.v1.utils.loaders.taskset_class`), built with
  its own config class (`vf.TasksetConfig` subclass) from `env.options`.
- Tasks: `Taskset.__iter__` (its views: `shuffle`, `take`). The test split is the first
  `env.test_tasks` distinct tasks (by `Task.key`), train the next `env.train_tasks`; with
  `env.test_options` the test split loads from a second taskset whose config is
  `options` updated by `test_options`, and a test task whose key train has is skipped.
- Prompts: `TaskData.prompt` (text, or messages: system messages + one user message) and
  `TaskData.system_prompt` -> Task.prompt and the system prompt (one for every task).
- Tools: the taskset's `Taskset.toolsets(config)` (shared) and the task's
  `Task.toolsets(task.config)` (one set per episode, `setup()` + `setup_task(data)`), each
  served IN-PROCESS by an `mcp` MCPServer it registers its `@vf.tool` methods on, called
  through `mcp.Client` (the real MCP protocol, no subprocess); named `<server>_<tool>` as
  verifiers' harness names them (verifiers/v1/harnesses/utils/mcp.py, connect_mcp).
- The answer: the model's final reply without a tool call (verifiers' rollout ends
  there), routed to the hidden `answer` tool. It is scored by `Task.score(trace)` on a
  `vf.Trace` of the episode's messages; the weighted total `trace.reward` is the judge
  (correct when >= env.correct_threshold) and each `@vf.reward` is a reward component of
  the `vf_reward` scheme (`reward.weights.<name>` overrides its weight); `@vf.metric`s are
  behaviour columns.
"""
from __future__ import annotations

import asyncio
import importlib
import json
import logging
import math
import os
import threading
from dataclasses import dataclass, field
from typing import Any, Optional

from omegaconf import OmegaConf

from ablate.core.errors import ConfigError
from ablate.envs.registry import register_env
from ablate.protocol.environment import EnvError, Environment, _keys, optional_module
from ablate.protocol.task import Task, ToolResult
from ablate.protocol.config import EnvConfig
from ablate.protocol.rubric import Rubric, weights_of

log = logging.getLogger(__name__)

PIN = "verifiers==0.4.0"
INSTALL = (f"pip install 'ablate[verifiers]' (or: pip install {PIN}, best in its own venv: "
           "docs/environments.md)")
ANSWER = "answer"


def vf():
    """verifiers.v1, or one EnvError line with the install command."""
    return optional_module("verifiers.v1", "verifiers", "verifiers", INSTALL)


@dataclass
class VerifiersEnvConfig(EnvConfig):
    name: str = "verifiers"
    taskset: Optional[str] = None        # pkg.module:Class (a vf.Taskset) or a taskset id
    max_turns: int = 4                   # model turns (tool calls, then the reply)
    train_tasks: int = 64                # distinct tasks after the test split
    test_tasks: int = 16                 # the taskset's first distinct tasks (held out)
    test_options: Optional[dict] = None  # the test split's own config (over env.options)
    shuffle_seed: Optional[int] = None   # Taskset.shuffle(seed) before splitting
    correct_threshold: float = 1.0       # correct when the taskset's Trace.reward >= this
    timeout_s: float = 60.0              # per tool call, per scoring (seconds)


# ---------------------------------------------------------------------- the event loop
class _Loop:
    """One asyncio loop in a daemon thread per process (verifiers' tools and scoring are
    async; ablate's environment protocol is synchronous and called from many threads)."""

    def __init__(self):
        self.pid, self.loop, self.lock = None, None, threading.Lock()

    def run(self, coro, timeout: float):
        with self.lock:
            if self.pid != os.getpid():        # none yet, or a forked child
                self.loop = asyncio.new_event_loop()
                threading.Thread(target=self.loop.run_forever, daemon=True,
                                 name="ablate-verifiers").start()
                self.pid = os.getpid()
        future = asyncio.run_coroutine_threadsafe(coro, self.loop)
        try:
            return future.result(timeout)
        except TimeoutError:
            future.cancel()
            raise


LOOP = _Loop()


# ---------------------------------------------------------------------- the taskset
def taskset_class(path: Optional[str]) -> type:
    """The Taskset class `env.taskset` names; one EnvError line naming the key if not."""
    v = vf()
    if not path:
        raise EnvError("env=verifiers needs env.taskset: pkg.module:Class (a "
                       "verifiers.v1 Taskset) or an installed taskset id")
    try:
        if ":" in path:
            module, _, qual = path.partition(":")
            obj: Any = importlib.import_module(module)
            for attr in qual.split("."):
                obj = getattr(obj, attr)
        else:
            obj = importlib.import_module("verifiers.v1.utils.loaders").taskset_class(path)
    except (ImportError, AttributeError, TypeError, ValueError) as exc:
        raise EnvError(f"env.taskset={path!r}: cannot import it ({type(exc).__name__}: "
                       f"{' '.join(str(exc).split())[:200]}); expected pkg.module:Class, a "
                       "verifiers.v1 Taskset, or an installed taskset id") from None
    if not (isinstance(obj, type) and issubclass(obj, v.Taskset)):
        raise EnvError(f"env.taskset={path!r} is not a verifiers.v1 Taskset subclass")
    return obj


def taskset_config(cls: type, options: dict, key: str = "env.options"):
    """The taskset's own config (its vf.TasksetConfig specialisation) from `options`."""
    v = vf()
    generic = importlib.import_module("verifiers.v1.utils.generic")
    config_cls = generic.concrete_type(cls, v.TasksetConfig, origin=v.Taskset) \
        or v.TasksetConfig
    try:
        return config_cls.model_validate(dict(options))
    except Exception as exc:        # pydantic's ValidationError: first error, one line
        errors = getattr(exc, "errors", lambda: [])()
        where = ".".join(map(str, errors[0]["loc"])) if errors else ""
        msg = errors[0]["msg"] if errors else str(exc)
        raise EnvError(f"{key}{'.' + where if where else ''}: {msg} (the config of "
                       f"{cls.__name__} is {config_cls.__name__}; its fields: "
                       f"{', '.join(config_cls.model_fields)})") from None


def _plain(value: Any) -> dict:
    """An OmegaConf mapping as a plain dict (pydantic validates those)."""
    if OmegaConf.is_config(value):
        return OmegaConf.to_container(value, resolve=True)
    return dict(value or {})


# ---------------------------------------------------------------------- tools, in-process
@dataclass
class _Served:
    """A Toolset registered on an in-process MCPServer."""
    prefix: str
    server: Any


async def _serve(toolset: Any, data: Any = None) -> _Served:
    """verifiers' ServerBase._serve without the subprocess and HTTP: setup(), setup_task
    for a task-scoped toolset, register() on an MCPServer (verifiers/v1/mcp/server.py)."""
    v = vf()
    if getattr(toolset.config, "url", None):
        raise EnvError(f"env=verifiers: toolset {type(toolset).__name__} has a url (a "
                       "remote MCP server); only in-process toolsets are supported")
    if importlib.import_module("verifiers.v1.state").state_cls(type(toolset)) is not v.State:
        raise EnvError(f"env=verifiers: toolset {type(toolset).__name__} keeps a State "
                       "(verifiers' state channel); not supported in-process yet")
    from mcp.server.mcpserver import MCPServer
    await toolset.setup()
    if data is not None:
        await toolset.setup_task(data)
    server = MCPServer(toolset.server_name or type(toolset).__name__)
    toolset.register(server)
    return _Served(toolset.server_name, server)


async def _list_tools(served: _Served) -> list:
    from mcp import Client
    async with Client(served.server) as client:
        return list((await client.list_tools()).tools)


async def _call_tool(served: _Served, name: str, arguments: dict) -> tuple[str, bool]:
    """(the tool message's text, is_error) as verifiers' harness renders it."""
    from mcp import Client
    render = importlib.import_module("verifiers.v1.harnesses.utils.mcp")
    async with Client(served.server) as client:
        result = await client.call_tool(name, arguments)
    content = render.mcp_content_to_chat_content(result.content)
    text = content if isinstance(content, str) else json.dumps(content)
    return text, bool(result.is_error)


# ---------------------------------------------------------------------- rewards
class TasksetRubric(Rubric):
    """The taskset's own `@vf.reward`s (and plugged judges) as components: each is
    weight x score, the weight its `@vf.reward(weight=...)` unless `reward.weights.<name>`
    overrides it; the total is verifiers' Trace.reward (verifiers/v1/trace.py) under the
    same weights. The names are the taskset's, so they are checked against each scored
    episode (an episode cut before its reply scores 0 on the task's declared rewards)."""

    def __init__(self):
        super().__init__(doc="verifiers: the taskset's weighted @vf.reward components")

    def check_weights(self, weights, scheme: str = "") -> None:
        for name, w in weights.items():
            if isinstance(w, bool) or not isinstance(w, (int, float)) or not math.isfinite(w):
                raise ConfigError(f"reward.weights.{name}={w!r} is not allowed; give a "
                                  "finite number")

    def __call__(self, episode: Any, cfg: Optional[Any] = None):
        weights = weights_of(cfg)
        self.check_weights(weights)
        recorded = scored_rewards(episode)
        unknown = [n for n in weights if recorded and n not in recorded]
        if unknown:
            raise ConfigError(f"reward.weights.{unknown[0]} is not a reward of the taskset; "
                              f"its rewards: {sorted(recorded)}")
        comps = {n: float(weights.get(n, w)) * s for n, (s, w) in recorded.items()}
        return sum(comps.values()), comps


def scored_rewards(episode: Any) -> dict[str, tuple[float, float]]:
    """name -> (score, weight) of the episode's scored reply; without one, the task's
    declared @vf.reward names at score 0."""
    final = [r for r in episode.results if r.done and r.error is None]
    if final and "rewards" in final[-1].extra:
        return {k: (float(s), float(w)) for k, (s, w) in final[-1].extra["rewards"].items()}
    payload = getattr(getattr(episode, "task", None), "payload", None)
    hooks = payload.hooks("reward") if hasattr(payload, "hooks") else []
    return {fn.__name__: (0.0, float(getattr(fn, "_vf_weight", 1.0))) for fn in hooks}


vf_reward = TasksetRubric()


# ---------------------------------------------------------------------- the environment
@dataclass
class VFState:
    task: Task
    servers: list                                    # shared + this episode's toolsets
    dispatch: dict                                   # tool name -> (server, raw name)
    messages: list = field(default_factory=list)     # vf messages after the prompt
    calls: set = field(default_factory=set)          # (name, arguments) seen
    scored: Optional[dict] = None                    # the answer step's extra


@register_env("verifiers", rewards={"vf_reward": vf_reward}, default_reward="vf_reward",
              behaviour_labels={
                  "vf_reward": "the taskset's weighted reward (verifiers Trace.reward)"})
class VerifiersEnv(Environment):
    answer_tool = ANSWER
    config_schema = VerifiersEnvConfig

    def __init__(self, taskset: Optional[str] = None, options: Optional[dict] = None,
                 test_options: Optional[dict] = None, train_tasks: int = 64,
                 test_tasks: int = 16, shuffle_seed: Optional[int] = None,
                 correct_threshold: float = 1.0, timeout_s: float = 60.0,
                 max_turns: int = 4):
        self.cls = taskset_class(taskset)
        self.config = taskset_config(self.cls, _plain(options))
        self.test_config = None if test_options is None else taskset_config(
            self.cls, {**_plain(options), **_plain(test_options)}, "env.test_options")
        self.counts = {"train": int(train_tasks), "test": int(test_tasks)}
        for split, n in self.counts.items():
            if n < 1:
                raise EnvError(f"env.{split}_tasks={n}; allowed: >= 1")
        if timeout_s <= 0:
            raise EnvError(f"env.timeout_s={timeout_s}; allowed: > 0")
        self.shuffle_seed, self.timeout_s = shuffle_seed, float(timeout_s)
        self.correct_threshold, self.max_turns = float(correct_threshold), int(max_turns)
        self._tasks: dict[str, list[Task]] = {}
        self._shared: Optional[list[_Served]] = None
        self._schemas: Optional[list[dict]] = None

    @classmethod
    def from_config(cls, env_cfg, **objects) -> "VerifiersEnv":
        get = env_cfg.get if hasattr(env_cfg, "get") else (
            lambda k, d=None: getattr(env_cfg, k, d))
        keys = ("taskset", "test_options", "train_tasks", "test_tasks", "shuffle_seed",
                "correct_threshold", "timeout_s", "max_turns")
        kw = {k: get(k) for k in keys if get(k, None) is not None}
        return cls(options=get("options", None) or {}, **kw)

    @classmethod
    def check_config(cls, env_cfg) -> None:
        get = env_cfg.get if hasattr(env_cfg, "get") else (
            lambda k, d=None: getattr(env_cfg, k, d))
        super().check_config({k: get(k) for k in _keys(env_cfg) if k != "options"})
        taskset = taskset_class(get("taskset", None))
        taskset_config(taskset, _plain(get("options", None)))

    @classmethod
    def prompt_text(cls, env_cfg) -> str:
        env = cls.from_config(env_cfg)
        return env.system_prompt() + json.dumps(env.prompt_tool_schemas())

    # ---------------------------------------------------------------- tasks
    def tasks(self, split: str) -> list[Task]:
        if split not in self.counts:
            raise EnvError(f"env=verifiers: split {split!r}; allowed: train, test")
        if not self._tasks:
            self._load()
        return self._tasks[split]

    def _stream(self, config):
        view = self.cls(config)
        if self.shuffle_seed is not None:
            view = view.shuffle(int(self.shuffle_seed))
        return iter(view)

    def _take(self, stream, n: int, seen: set, split: str) -> list:
        out: list = []
        while len(out) < n:               # pull no task past the n-th (train follows test)
            task = next(stream, None)
            if task is None:
                break
            if task.key not in seen:
                seen.add(task.key)
                out.append(task)
        if len(out) < n:
            raise EnvError(f"env=verifiers: {self.cls.__name__} gave only {len(out)} distinct "
                           f"{split} tasks of env.{split}_tasks={n}; ask for fewer")
        return out

    def _load(self) -> None:
        seen: set = set()
        stream = self._stream(self.config)
        if self.test_config is None:       # test: the head of the stream, train: the rest
            test = self._take(stream, self.counts["test"], seen, "test")
            train = self._take(stream, self.counts["train"], seen, "train")
        else:                              # a second taskset; its tasks train has skipped
            train = self._take(stream, self.counts["train"], seen, "train")
            test = self._take(self._stream(self.test_config), self.counts["test"], seen,
                              "test")
        systems = {self._prompt(t.data)[0] for t in train + test}
        if len(systems) > 1:
            raise EnvError("env=verifiers: the tasks have different system prompts; ablate "
                           "gives every episode one (set the taskset's system_prompt)")
        self._system = systems.pop()
        self._tasks = {s: [self._task(s, t) for t in ts]
                       for s, ts in (("train", train), ("test", test))}

    def _task(self, split: str, vt: Any) -> Task:
        data, answer = vt.data, getattr(vt.data, "answer", None)
        return Task(id=f"{split}-{data.idx}", prompt=self._prompt(data)[1], payload=vt,
                    key=f"verifiers:{vt.key}",
                    answer="" if answer is None else str(answer),
                    metadata={"difficulty": 1, "split": split, "idx": data.idx,
                              "key": vt.key[:16], **({"name": data.name} if data.name else {})})

    def _prompt(self, data: Any) -> tuple[str, str]:
        """(system prompt, user prompt) of a task: TaskData.system_prompt and the prompt's
        text, or its system messages and its one user message."""
        system, messages = data.system_prompt or "", data.prompt
        if isinstance(messages, str):
            return system, messages
        messages = list(messages or [])
        systems = [m for m in messages if m.role == "system"]
        users = [m for m in messages if m.role != "system"]
        if len(users) != 1 or users[0].role != "user":
            raise EnvError(f"env=verifiers: task {data.idx} has a prompt of "
                           f"{[m.role for m in messages] or 'no messages'}; supported: "
                           "text, or system messages and one user message")
        text = importlib.import_module("verifiers.v1.types").content_text
        system = "\n\n".join([system] * bool(system) + [text(m.content) for m in systems])
        return system, text(users[0].content)

    # ---------------------------------------------------------------- prompt and tools
    def system_prompt(self) -> str:
        self.tasks("train")
        return self._system

    def _shared_servers(self) -> list[_Served]:
        if self._shared is None:
            toolsets = self.cls.toolsets(self.config)
            self._shared = [LOOP.run(_serve(t), self.timeout_s) for t in toolsets]
        return self._shared

    def _task_servers(self, vt: Any, data: Any = None) -> list[_Served]:
        return [LOOP.run(_serve(t, data), self.timeout_s)
                for t in type(vt).toolsets(vt.config)]

    def _dispatch(self, servers: list[_Served]) -> tuple[list[dict], dict]:
        schemas, dispatch = [], {}
        for served in servers:
            for tool in LOOP.run(_list_tools(served), self.timeout_s):
                full = f"{served.prefix}_{tool.name}" if served.prefix else tool.name
                if full in dispatch or full == ANSWER:
                    raise EnvError(f"env=verifiers: two tools are named {full!r} (or one is "
                                   f"named {ANSWER!r}); give a toolset its own TOOL_PREFIX")
                dispatch[full] = (served, tool.name)
                schemas.append({"type": "function", "function": {
                    "name": full, "description": tool.description or "",
                    "parameters": tool.input_schema}})
        return schemas, dispatch

    def tool_schemas(self) -> list[dict]:
        if self._schemas is None:
            first = self.tasks("train")[0].payload
            schemas, _ = self._dispatch(self._shared_servers() + self._task_servers(first))
            self._schemas = schemas + [{"type": "function", "function": {
                "name": ANSWER, "description": "The final reply (written as text).",
                "parameters": {"type": "object", "additionalProperties": False,
                               "properties": {"answer": {"type": "string"}},
                               "required": ["answer"]}}}]
        return self._schemas

    def prompt_tool_schemas(self) -> list[dict]:
        """The final reply is text (verifiers' rollout ends on a reply without a tool
        call): the answer tool is not shown."""
        return [s for s in self.tool_schemas() if s["function"]["name"] != ANSWER]

    def text_answer(self, text: str) -> Optional[dict]:
        return {"answer": text.strip()}

    # ---------------------------------------------------------------- episodes
    def reset(self, task: Task) -> VFState:
        vt = task.payload
        servers = self._shared_servers() + self._task_servers(vt, vt.data)
        _, dispatch = self._dispatch(servers)
        return VFState(task=task, servers=servers, dispatch=dispatch)

    def step(self, state: VFState, name: str, arguments: dict) -> ToolResult:
        if name == ANSWER:
            answer = arguments["answer"]
            if not isinstance(answer, str):
                msg = 'Error: answer needs "answer": a string.'
                return ToolResult(name, arguments, observation=msg, error=msg)
            state.scored = self.score(state.task, answer, state.messages)
            return ToolResult(name, arguments, observation="Answered.", done=True,
                              answer=answer, state_changed=True, extra=state.scored)
        served, raw = state.dispatch[name]
        try:
            text, is_error = LOOP.run(_call_tool(served, raw, arguments), self.timeout_s)
        except TimeoutError:
            text, is_error = f"Error: {name} did not finish within {self.timeout_s} s.", True
        v = vf()
        call_id = f"call_{len(state.messages) // 2}"
        state.messages += [
            v.AssistantMessage(content=None, tool_calls=[v.ToolCall(
                id=call_id, name=name, arguments=json.dumps(arguments))]),
            v.ToolMessage(content=text, tool_call_id=call_id, name=name)]
        key = (name, json.dumps(arguments, sort_keys=True))
        changed = not is_error and key not in state.calls
        state.calls.add(key)
        return ToolResult(name, arguments, observation=text, state_changed=changed,
                          error=text if is_error else None)

    def trace(self, task: Task, answer: str, messages: list) -> Any:
        """A vf.Trace of the episode: system, the prompt, tool calls and results, the
        reply (one branch of MessageNodes; no token ids: scoring reads messages)."""
        v = vf()
        graph = importlib.import_module("verifiers.v1.graph")
        vt, system = task.payload, self.system_prompt()
        head = [v.SystemMessage(content=system)] if system else []
        prompt = vt.data.prompt
        head += [m for m in prompt if m.role != "system"] if not isinstance(prompt, str) \
            else [v.UserMessage(content=prompt)]
        path = head + list(messages) + [v.AssistantMessage(content=answer)]
        nodes = [graph.MessageNode(parent=i - 1 if i else None, message=m,
                                   sampled=m.role == "assistant") for i, m in enumerate(path)]
        return v.Trace(task=v.TraceTask(type=type(vt).__name__, data=vt.data, key=vt.key),
                       agent=v.AgentInfo(config=v.AgentConfig()), nodes=nodes)

    def score(self, task: Task, answer: str, messages: list = ()) -> dict:
        """Task.score on the episode's trace: {"vf_reward", "rewards": name -> [score,
        weight], "metrics"}; a taskset whose scoring raises scores 0 (logged)."""
        trace = self.trace(task, answer, list(messages))
        try:
            LOOP.run(task.payload.score(trace), self.timeout_s)
        except Exception as exc:   # vf.TaskError (its scoring raised) or a timeout
            log.warning("env=verifiers: scoring task %s raised %s", task.id,
                        " ".join(str(exc).split())[:300])
            return {"vf_reward": 0.0, "rewards": {}, "metrics": {}}
        rewards = {k: [r.score, r.weight] for k, r in trace.rewards.items() if r is not None}
        metrics = {k: float(m) for k, m in trace.metrics.items() if m is not None}
        return {"vf_reward": float(trace.reward), "rewards": rewards, "metrics": metrics}

    def is_correct(self, task: Task, answer: Optional[str], state: Any) -> bool:
        if answer is None:
            return False
        scored = getattr(state, "scored", None) or self.score(
            task, answer, getattr(state, "messages", ()))
        return scored["vf_reward"] >= self.correct_threshold

    def behaviour(self, task: Task, results: list[ToolResult]) -> dict:
        final = [r for r in results if r.done and r.error is None]
        extra = final[-1].extra if final else {}
        return {"vf_reward": float(extra.get("vf_reward", 0.0)),
                **{k: v for k, v in extra.get("metrics", {}).items()}}


    def baseline(self, task: Task, seed: int = 0):
        """Replies with the task's `answer` field when its data has one (a ceiling that
        checks the plumbing), else an empty reply."""
        return lambda results: None if results else (ANSWER, {"answer": task.answer})
