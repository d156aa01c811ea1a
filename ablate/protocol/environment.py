"""The environment protocol: what a task world must provide to be trained and evaluated on.

An environment owns its tasks, its tool schemas (OpenAI function format), its system
prompt, a per-episode state made by `reset`, a `step` from (state, tool name, arguments)
to an observation plus structured info, the correctness of a final answer, its behaviour
metrics. A feature only some worlds have is a `typing.Protocol` beside the code that
uses it (docs/environments.md, "Optional features"): Maskable (ablate/harness/masking.py),
Predictable (ablate/harness/parser.py), Expands (ablate/harness/rollout.py), SkillWorld
(ablate/agents/skills.py), BatchJudge below and Demonstrable (trajectory.py). The
harness, the rewards and the cell loop read only this protocol; docs/environments.md has
a complete example.

Design (read, not copied): verifiers' `MultiTurnEnv.setup_state` / `env_response` keep
per-rollout state outside the environment object, and TRL's `environment_factory` makes
one environment instance per rollout with its tools as methods; here one environment
object serves many episodes and every episode's mutable world lives in its `state`.

Rules every environment keeps:
- `step` never raises on bad input (unknown tool, arguments that are not a JSON object,
  wrong types): the problem comes back as an observation with `error` set, so the model
  can read it and act on it. `Environment.call` wraps `step` to guarantee this.
- `ToolResult.state_changed` is True only when the call changed the world (or what the
  agent knows of it); rewards that pay for actions condition on it (see
  docs/environments.md, "Rewarding effects, not actions").
- Calling `answer_tool` without error ends the episode; `ToolResult.answer` holds the
  answer the judge will see.
"""
from __future__ import annotations

import dataclasses
import importlib
import inspect
import json
import logging
from abc import ABC, abstractmethod
from typing import Any, Optional, Protocol, runtime_checkable

from ablate.protocol.config import EnvConfig
from ablate.protocol.task import Task, ToolResult

log = logging.getLogger(__name__)


class EnvError(ValueError):
    """A user mistake in choosing or configuring an environment (one-line message)."""


def optional_module(module: str, env: str, package: str, install: str):
    """The optional package `module` an environment adapter needs, or one EnvError line
    naming the environment, the package and the install command."""
    try:
        return importlib.import_module(module)
    except ImportError:
        raise EnvError(f"env={env} needs the {package} package: {install}") from None


class Environment(ABC):
    """Base class of every environment. Subclasses implement the abstract methods and are
    registered with @register_env("name"); `name` and `answer_tool` are class attributes."""

    name: str = ""
    answer_tool: str = ""
    # what the environment owns beside its methods (docs/environments.md)
    config_schema: type = EnvConfig     # its `env` keys: EnvConfig or a subclass of it
    # its rewards, default reward and table labels are declared where it registers
    # (ablate/envs/registry.py, register_env)

    # ------------------------------------------------------------------ required
    @abstractmethod
    def tasks(self, split: str) -> list[Task]:
        """The tasks of `split` ("train" or "test", the held-out split)."""

    @abstractmethod
    def tool_schemas(self) -> list[dict]:
        """OpenAI function-format schemas; one of them is named `answer_tool`."""

    @abstractmethod
    def system_prompt(self) -> str:
        """The system message of every episode."""

    @abstractmethod
    def reset(self, task: Task) -> Any:
        """A fresh per-episode state for `task`."""

    @abstractmethod
    def step(self, state: Any, name: str, arguments: dict) -> ToolResult:
        """Run one well-formed call (`name` is a known tool, `arguments` a dict) on
        `state`, mutating it. Bad argument values return a ToolResult with `error`."""

    @abstractmethod
    def is_correct(self, task: Task, answer: Optional[str], state: Any) -> bool:
        """Correctness of the episode's outcome (a configured judge may override)."""

    # ------------------------------------------------------------------ optional
    @classmethod
    def from_config(cls, env_cfg, **objects) -> "Environment":
        """From the `env` config group: the keys (and `env.options.<key>`) that name a
        constructor parameter are passed, the others (`name`, `_target_`, ...) ignored;
        `objects` (e.g. a judge made from another group) are passed when the constructor
        takes them."""
        params = inspect.signature(cls.__init__).parameters
        get = env_cfg.get if hasattr(env_cfg, "get") else (
            lambda k, d=None: getattr(env_cfg, k, d))
        kw = {k: get(k) for k in params if k != "self" and get(k, None) is not None}
        kw.update({k: v for k, v in dict(get("options", None) or {}).items() if k in params})
        kw.update({k: v for k, v in objects.items() if k in params})
        return cls(**kw)

    @classmethod
    def check_config(cls, env_cfg) -> None:
        """EnvError (one line, naming the environment and what it allows) for a key its
        schema lacks or an option its constructor does not take; an environment adds its
        own value checks (super().check_config first)."""
        label = _get(env_cfg, "name") or cls.name or cls.__name__
        keys = [k for k in _keys(env_cfg) if k not in config_keys(cls)]
        if keys:
            raise EnvError(f"env={label} has no key env.{keys[0]}; allowed: "
                           f"{', '.join(config_keys(cls))}")
        options = [k for k in _keys(_get(env_cfg, "options")) if k not in option_keys(cls)]
        if options:
            raise EnvError(f"env={label} takes no option env.options.{options[0]}; allowed: "
                           f"{', '.join(option_keys(cls)) or '(none)'}")

    @classmethod
    def prompt_text(cls, env_cfg) -> str:
        """The text of every episode's prompt beside the question (system prompt and
        tool schemas): preflight sizes the question budget with it. The default builds
        the environment; one with constant prompts returns them without building."""
        env = cls.from_config(env_cfg)
        try:
            return (env.system_prompt() + json.dumps(prompt_tools(env))
                    + "".join(q + r for q, r in examples(env)))
        finally:
            env.close()

    def describe(self) -> dict:
        """What a reader of a cell's rows needs of its environment (environment.json):
        its name and tools (the cell adds what the world declared when it registered,
        ablate/envs/registry.py, and a Predictable world's outcome labels)."""
        return {"name": self.name, "answer_tool": self.answer_tool,
                "tools": list(tool_names(self))}

    def behaviour(self, task: Task, results: list[ToolResult]) -> dict:
        """Per-episode behaviour metrics (JSON scalars) beyond the generic ones."""
        return {}

    def close(self) -> None:
        """Release files, connections."""

    # ------------------------------------------------------------------ provided
    def call(self, state: Any, name: Any, arguments: Any) -> ToolResult:
        """`step` made safe for model output: parses JSON-string arguments, rejects
        unknown tools and non-object or unexpected arguments with an observation, and
        turns an exception inside the environment into an `internal` error. Never raises."""
        tool = name if isinstance(name, str) else ""
        args = parse_arguments(arguments)
        problem = self._check_call(tool, name, args, arguments)
        if problem is not None:
            return ToolResult(name=tool, arguments=args if isinstance(args, dict) else None,
                              observation=problem, error=problem)
        try:
            result = self.step(state, tool, args)
        except Exception as exc:   # a bug in an environment must not kill the rollout
            self._log_failure(tool, exc, arguments)
            return ToolResult(name=tool, arguments=args,
                              observation=f"Error: {tool} failed inside the environment.",
                              error=f"internal: {type(exc).__name__}: {exc}")
        check_result(self, tool, result)
        return result

    def _log_failure(self, tool: str, exc: Exception, arguments: Any) -> None:
        """Once per (tool, exception type) with its traceback, then a line with the count
        at the 10th, 100th, ... time: a broken tool does not flood the log."""
        counts = self.__dict__.setdefault("tool_failures", {})
        key = (tool, type(exc).__name__)
        counts[key] = n = counts.get(key, 0) + 1
        if n == 1:
            log.error("env %s: tool %s raised %s on %s (shown to the model as an internal "
                      "error; later %s of %s are counted, not logged)", self.name, tool,
                      key[1], quote(arguments, 200), key[1], tool, exc_info=exc)
        elif n in (10, 100, 1000, 10000):
            log.error("env %s: tool %s raised %s %d times so far", self.name, tool, key[1], n)

    def _check_call(self, tool: str, raw_name: Any, args: Any, raw_args: Any) -> Optional[str]:
        names = tool_names(self)
        if tool not in names:
            shown = quote(raw_name) if raw_name not in (None, "") else "(none)"
            return f"Error: unknown tool {shown}. Available tools: {', '.join(names)}."
        if not isinstance(args, dict):
            return (f"Error: the arguments of {tool} must be a JSON object; "
                    f"got {quote(raw_args)}.")
        params = self._params(tool)
        extra = [k for k in args if k not in params]
        if extra:
            return (f"Error: {tool} got unexpected argument(s) "
                    f"{', '.join(quote(k, 30) for k in extra[:3])}; it takes "
                    f"{', '.join(params) or 'no arguments'}.")
        missing = [k for k in self._required(tool) if k not in args]
        if missing:
            return f"Error: {tool} needs argument(s) {', '.join(missing)}."
        return None

    def _params(self, tool: str) -> tuple[str, ...]:
        return tuple(self._schema(tool).get("properties", {}))

    def _required(self, tool: str) -> tuple[str, ...]:
        return tuple(self._schema(tool).get("required", ()))

    def _schema(self, tool: str) -> dict:
        for s in self.tool_schemas():
            if s["function"]["name"] == tool:
                return s["function"].get("parameters", {})
        return {}


def config_keys(cls: type[Environment]) -> tuple[str, ...]:
    """The `env.<key>` an environment accepts: the fields of its config_schema."""
    return tuple(f.name for f in dataclasses.fields(cls.config_schema))


def option_keys(cls: type[Environment]) -> tuple[str, ...]:
    """The `env.options.<key>` it accepts: constructor arguments that are no key of its
    schema (Environment.from_config passes them); none when the class has its own
    from_config (it reads env.options itself and checks them in its check_config)."""
    if cls.from_config.__func__ is not Environment.from_config.__func__:
        return ()
    params = inspect.signature(cls.__init__).parameters.values()
    return tuple(p.name for p in params if p.name != "self" and p.kind not in (
        p.VAR_POSITIONAL, p.VAR_KEYWORD) and p.name not in config_keys(cls))


def tool_names(env: Environment) -> tuple[str, ...]:
    """The names of the environment's tools, in schema order."""
    return tuple(s["function"]["name"] for s in env.tool_schemas())


def split_tasks(env: Environment, split: str) -> list[Task]:
    """`env.tasks(split)`, made once per environment object (the cell and preflight read
    the splits many times; a world may generate them)."""
    cache = env.__dict__.setdefault("_split_tasks", {})
    if split not in cache:
        cache[split] = env.tasks(split)
    return cache[split]


def check_result(env: Environment, tool: str, result: Any) -> None:
    """EnvError (one line) for what a tool returned that breaks the protocol: a bug of
    the environment, not of the model's input."""
    label = f"env={env.name or type(env).__name__}: tool {tool}"
    if not isinstance(result, ToolResult):
        raise EnvError(f"env={env.name or type(env).__name__}: step() returned a "
                       f"{type(result).__name__} for tool {tool}; expected an "
                       "ablate.envs.ToolResult")
    if not isinstance(result.observation, str):
        raise EnvError(f"{label} returned a {type(result.observation).__name__} "
                       "observation; expected a str (the text the model reads)")
    if result.done and tool != env.answer_tool:
        raise EnvError(f"{label} ended the episode; only answer_tool="
                       f"{env.answer_tool!r} may")


def _get(cfg: Any, key: str) -> Any:
    if cfg is None:
        return None
    return cfg.get(key) if hasattr(cfg, "get") else getattr(cfg, key, None)


def _keys(cfg: Any) -> list[str]:
    if cfg is None:
        return []
    if hasattr(cfg, "keys"):
        return [str(k) for k in cfg.keys()]
    return [f.name for f in dataclasses.fields(cfg)] if dataclasses.is_dataclass(cfg) else []


def parse_arguments(arguments: Any) -> Any:
    """OpenAI tool calls carry arguments as a JSON string; accept that or a dict. None
    (no arguments) is an empty object; anything else is returned as is (and rejected)."""
    if arguments is None:
        return {}
    if isinstance(arguments, str):
        try:
            return json.loads(arguments)
        except (json.JSONDecodeError, RecursionError):
            return arguments
    return arguments


def quote(value: Any, limit: int = 60) -> str:
    """A short rendering of a model-sent value for error messages (strings quoted)."""
    if isinstance(value, str):
        text = value if len(value) <= limit else value[:limit] + "…"
        return json.dumps(text, ensure_ascii=False)
    try:
        text = json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError, RecursionError):
        text = repr(value)
    return text if len(text) <= limit else text[:limit] + "…"


@runtime_checkable
class BatchJudge(Protocol):
    """A world that judges many episodes at once (an LLM judge's batched requests)."""

    def judge_many(self, items: list[tuple[Task, Optional[str], Any]]) -> list[bool]: ...


def judge_all(env: Environment, items: list[tuple[Task, Optional[str], Any]]) -> list[bool]:
    """is_correct of many (task, answer, final state): the world's batched judge when it
    has one (BatchJudge), else one is_correct per item."""
    if isinstance(env, BatchJudge):
        return list(env.judge_many(items))
    return [bool(env.is_correct(t, a, s)) for t, a, s in items]


@runtime_checkable
class TextAnswers(Protocol):
    """A world whose final answer may be written as text in a turn without a well-formed
    tool call (e.g. `<answer>42</answer>`): `text_answer` gives the answer tool's
    arguments for it (None: no answer), and `prompt_tool_schemas` the tools described in
    the prompt (it may leave the answer tool out)."""

    def text_answer(self, text: str) -> Optional[dict]: ...

    def prompt_tool_schemas(self) -> list[dict]: ...


def prompt_tools(env: Environment) -> list[dict]:
    """The tools described to the model in its prompt: all of tool_schemas() unless the
    world writes its answer as text (TextAnswers)."""
    return env.prompt_tool_schemas() if isinstance(env, TextAnswers) else env.tool_schemas()


def answer_from_text(env: Environment, text: str) -> Optional[dict]:
    """The answer tool's arguments a TextAnswers world reads in `text`; None otherwise."""
    return env.text_answer(text) if isinstance(env, TextAnswers) else None


@runtime_checkable
class FewShot(Protocol):
    """A world with worked (question, reply) pairs shown before every question as earlier
    chat turns (few-shot prompting; Brown et al. 2020, arXiv:2005.14165)."""

    def examples(self) -> list[tuple[str, str]]: ...


def examples(env: Environment) -> list[tuple[str, str]]:
    """A FewShot world's worked pairs; none otherwise."""
    return list(env.examples()) if isinstance(env, FewShot) else []
