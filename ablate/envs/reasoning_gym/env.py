"""`env=reasoning_gym`: any dataset of the reasoning-gym package (procedural generators
with their own scorers) as an ablate environment.

- Tasks: `reasoning_gym.create_dataset(env.dataset, **env.options, seed=S, size=N)`;
  the train and test splits draw from disjoint generator seeds (train S = 2·gen_seed·10⁶,
  test S + 10⁶: generators seed `Random(seed + index)`, so the index ranges never meet),
  and a test question whose text also occurs in train is skipped (small generators repeat
  questions), so the held-out split never shares a question with train.
- Judge: the dataset's own `score_answer(answer, entry)`; correct when the score is at
  least `env.correct_threshold` (1.0: an exact answer). The score itself is the
  `rg_score` reward (partial credit where the dataset gives it).
- Single-turn by default: the model writes its final answer as text between <answer>
  and </answer> (reasoning-gym's own format, `reasoning_gym.utils.extract_answer`),
  routed through the answer tool `answer` (hidden from the prompt). `env.shots=K` shows the
  first K train questions (`env.shots_seed`: K drawn), answered, as earlier chat turns
  (few-shot). With `env.tools=calculator` (and `env.max_turns` > 1) the model may call
  `calculator` before answering, which exercises the multi-turn harness.

The package is an optional extra: `pip install 'ablate[reasoning-gym]'`
(reasoning-gym==0.1.25); without it, building or checking this environment is one
EnvError line with that command.
"""
from __future__ import annotations

import dataclasses
import logging
import random
from dataclasses import dataclass, field
from typing import Any, Optional

from ablate.envs.registry import register_env
from ablate.protocol.environment import EnvError, Environment, _keys, optional_module
from ablate.protocol.task import Task, ToolResult
from ablate.envs.reasoning_gym.calculator import CalcError, evaluate
from ablate.envs.reasoning_gym.config import ReasoningGymEnvConfig
from ablate.envs.reasoning_gym.rewards import rg_score

log = logging.getLogger(__name__)

PIN = "reasoning-gym==0.1.25"
INSTALL = f"pip install 'ablate[reasoning-gym]' (or: pip install {PIN})"
ANSWER, CALC = "answer", "calculator"
TOOLS = ("none", CALC)
FORMATS = ("tag", "text")         # the answer between <answer> tags | the whole reply
SPLIT_STRIDE = 1_000_000          # seeds of one split: S .. S + SPLIT_STRIDE - 1
RESERVED = ("seed", "size")       # generator arguments ablate sets itself


def rg():
    """The reasoning_gym package, or one EnvError line with the install command."""
    return optional_module("reasoning_gym", "reasoning_gym", "reasoning-gym", INSTALL)


def dataset_names() -> list[str]:
    return sorted(rg().factory.DATASETS)


def generator_fields(dataset: str) -> tuple[str, ...]:
    """The generator arguments `dataset` takes (its config dataclass's fields)."""
    registry = rg().factory.DATASETS
    if dataset not in registry:
        raise EnvError(f"env.dataset={dataset!r} is not a reasoning-gym dataset; allowed: "
                       f"{', '.join(sorted(registry))}")
    return tuple(f.name for f in dataclasses.fields(registry[dataset][1])
                 if f.name not in RESERVED)


@dataclass
class RGState:
    task: Task
    calculated: list = field(default_factory=list)   # expressions evaluated so far


def _tool(name: str, description: str, arg: str, arg_doc: str) -> dict:
    return {"type": "function", "function": {
        "name": name, "description": description,
        "parameters": {"type": "object", "additionalProperties": False,
                       "properties": {arg: {"type": "string", "description": arg_doc}},
                       "required": [arg]}}}


@register_env("reasoning_gym", rewards={"rg_score": rg_score}, default_reward="outcome",
              behaviour_labels={
                  "calculator_calls": "calculator calls that computed a value",
                  "score": "the dataset's score_answer of the final answer (0 if none)"})
class ReasoningGymEnv(Environment):
    answer_tool = ANSWER
    config_schema = ReasoningGymEnvConfig

    def __init__(self, dataset: str = "chain_sum", options: Optional[dict] = None,
                 gen_seed: int = 0, train_tasks: int = 400, test_tasks: int = 200,
                 tools: str = "none", prompt: str = "direct",
                 correct_threshold: float = 1.0, max_turns: int = 1,
                 answer_format: str = "tag", shots: int = 0,
                 shots_seed: Optional[int] = None):
        self.dataset, self.options = dataset, dict(options or {})
        self.gen_seed, self.tools, self.prompt = int(gen_seed), tools, prompt
        self.correct_threshold, self.max_turns = float(correct_threshold), int(max_turns)
        self.counts = {"train": int(train_tasks), "test": int(test_tasks)}
        self.answer_format, self.shots = answer_format, int(shots)
        self.shots_seed = None if shots_seed is None else int(shots_seed)
        self.check_values(dataset, self.options, tools, self.counts, answer_format,
                          self.shots)
        self._datasets: dict[str, Any] = {}
        self._tasks: dict[str, list[Task]] = {}

    # ---------------------------------------------------------------- configuration
    @classmethod
    def from_config(cls, env_cfg, **objects) -> "ReasoningGymEnv":
        """Every schema key, and `env.options` as the generator's arguments."""
        get = env_cfg.get if hasattr(env_cfg, "get") else (
            lambda k, d=None: getattr(env_cfg, k, d))
        keys = ("dataset", "gen_seed", "train_tasks", "test_tasks", "tools", "prompt",
                "correct_threshold", "max_turns", "answer_format", "shots", "shots_seed")
        kw = {k: get(k) for k in keys if get(k, None) is not None}
        return cls(options=dict(get("options", None) or {}), **kw)

    @classmethod
    def check_config(cls, env_cfg) -> None:
        get = env_cfg.get if hasattr(env_cfg, "get") else (
            lambda k, d=None: getattr(env_cfg, k, d))
        options = dict(get("options", None) or {})
        super().check_config({k: get(k) for k in _keys(env_cfg) if k != "options"})
        counts = {"train": get("train_tasks", 400), "test": get("test_tasks", 200)}
        cls.check_values(get("dataset", "chain_sum"), options, get("tools", "none"), counts,
                         get("answer_format", "tag"), get("shots", 0))

    @staticmethod
    def check_values(dataset: str, options: dict, tools: str, counts: dict,
                     answer_format: str = "tag", shots: int = 0) -> None:
        if tools not in TOOLS:
            raise EnvError(f"env.tools={tools!r}; allowed: {', '.join(TOOLS)}")
        if answer_format not in FORMATS:
            raise EnvError(f"env.answer_format={answer_format!r}; allowed: "
                           f"{', '.join(FORMATS)}")
        for split, n in counts.items():
            if not 1 <= int(n) < SPLIT_STRIDE:
                raise EnvError(f"env.{split}_tasks={n}; allowed 1..{SPLIT_STRIDE - 1}")
        if not 0 <= int(shots) <= int(counts["train"]):
            raise EnvError(f"env.shots={shots}; allowed 0..env.train_tasks "
                           f"({counts['train']}): the examples are train questions")
        allowed = generator_fields(dataset)
        for key in options:
            if key not in allowed:
                raise EnvError(f"env=reasoning_gym dataset {dataset} takes no option "
                               f"env.options.{key}; allowed: {', '.join(allowed)}"
                               + (" (seed and size come from env.gen_seed and "
                                  "env.train_tasks / env.test_tasks)" if key in RESERVED
                                  else ""))

    # ---------------------------------------------------------------- tasks
    def split_seed(self, split: str) -> int:
        return (2 * self.gen_seed + (split == "test")) * SPLIT_STRIDE % 2 ** 32

    def source(self, split: str):
        """The reasoning-gym dataset object of a split (its generator and scorer)."""
        if split not in self._datasets:
            size = min(self.counts[split] * 20, SPLIT_STRIDE)   # room for skipped repeats
            try:
                self._datasets[split] = rg().create_dataset(
                    self.dataset, **self.options, seed=self.split_seed(split), size=size)
            except (TypeError, ValueError, AssertionError) as exc:
                raise EnvError(f"env=reasoning_gym dataset {self.dataset} rejects its "
                               f"options {self.options}: {exc}") from None
        return self._datasets[split]

    def tasks(self, split: str) -> list[Task]:
        if split not in self.counts:
            raise EnvError(f"env=reasoning_gym: split {split!r}; allowed: train, test")
        if split not in self._tasks:
            seen = {t.prompt for t in self.tasks("train")} if split == "test" else set()
            self._tasks[split] = self._generate(split, seen)
        return self._tasks[split]

    def _generate(self, split: str, seen: set) -> list[Task]:
        ds, out = self.source(split), []
        for index in range(len(ds)):
            if len(out) == self.counts[split]:
                break
            entry = ds[index]
            if entry["question"] in seen:   # a repeat, or a question train has (test)
                continue
            seen.add(entry["question"])
            out.append(self._task(split, index, entry))
        if len(out) < self.counts[split]:
            raise EnvError(f"env=reasoning_gym dataset {self.dataset} gave only {len(out)} "
                           f"distinct {split} questions of env.{split}_tasks="
                           f"{self.counts[split]}; ask for fewer or widen env.options")
        return out

    def _task(self, split: str, index: int, entry: dict) -> Task:
        meta = entry.get("metadata") or {}
        level = meta.get("difficulty")
        return Task(id=f"{split}-{index}", prompt=entry["question"],
                    answer=str(entry["answer"]), payload=entry,
                    metadata={"difficulty": level if isinstance(level, int) else 1,
                              "split": split, "dataset": self.dataset,
                              "source_index": index})

    # ---------------------------------------------------------------- prompt and tools
    def tool_schemas(self) -> list[dict]:
        answer = _tool(ANSWER, "Give the final answer. Ends the episode.", "answer",
                       "Only the final answer, in the format the question asks for.")
        if self.tools == CALC:
            return [_tool(CALC, "Evaluate an arithmetic expression (+ - * / // % ** and "
                          "parentheses).", "expression", "e.g. 12 * (3 + 4)"), answer]
        return [answer]

    def prompt_tool_schemas(self) -> list[dict]:
        """The answer is written as text (<answer>...</answer>): only the calculator is
        described to the model."""
        return [s for s in self.tool_schemas() if s["function"]["name"] != ANSWER]

    def system_prompt(self) -> str:
        prompts = rg().utils.SYSTEM_PROMPTS
        text = prompts.get(self.prompt, self.prompt).strip()
        if self.tools == CALC:
            text += ("\nYou may call the calculator tool to evaluate arithmetic before "
                     "you answer.")
        return text

    def examples(self) -> list[tuple[str, str]]:
        """env.shots > 0: `shots` train questions with their gold answers in the answer
        format, shown as earlier turns (train only: test never shares a question with
        train): the first ones, or with env.shots_seed a draw without replacement in
        train order, so that the choice of examples can be varied as a factor."""
        wrap = "<answer>{}</answer>" if self.answer_format == "tag" else "{}"
        train = self.tasks("train")
        picked = (range(self.shots) if self.shots_seed is None else
                  sorted(random.Random(self.shots_seed).sample(range(len(train)), self.shots)))
        return [(train[i].prompt, wrap.format(train[i].answer)) for i in picked]

    def text_answer(self, text: str) -> Optional[dict]:
        """answer_format=tag: the last <answer>...</answer> (reasoning_gym.utils.
        extract_answer); text: the whole reply, stripped (a tag still wins)."""
        found = rg().utils.extract_answer(text)
        if found is None and self.answer_format == "text" and text.strip():
            found = text.strip()
        return None if found is None else {"answer": found}

    # ---------------------------------------------------------------- episodes
    def reset(self, task: Task) -> RGState:
        return RGState(task=task)

    def step(self, state: RGState, name: str, arguments: dict) -> ToolResult:
        if name == CALC:
            return self._calculate(state, arguments)
        answer = arguments["answer"]
        if not isinstance(answer, str):
            msg = 'Error: answer needs "answer": a string.'
            return ToolResult(name, arguments, observation=msg, error=msg)
        score = self.score(state.task, answer)
        return ToolResult(name, arguments, observation="Answered.", done=True,
                          answer=answer, state_changed=True, extra={"score": score})

    def _calculate(self, state: RGState, arguments: dict) -> ToolResult:
        expression = arguments["expression"]
        try:
            value = evaluate(expression)
        except CalcError as exc:
            msg = f"Error: {exc}."
            return ToolResult(CALC, arguments, observation=msg, error=msg)
        changed = expression not in state.calculated
        state.calculated.append(expression)
        return ToolResult(CALC, arguments, observation=value, state_changed=changed)

    def score(self, task: Task, answer: Optional[str]) -> float:
        """The dataset's own score_answer (0.0 when it fails on this answer)."""
        try:
            value = self.source(task.metadata["split"]).score_answer(answer, task.payload)
        except Exception as exc:   # a scorer that chokes on model text scores 0
            log.warning("reasoning_gym %s: score_answer raised %s on %r", self.dataset,
                        type(exc).__name__, (answer or "")[:100])
            return 0.0
        return float(value)

    def is_correct(self, task: Task, answer: Optional[str], state: Any) -> bool:
        return answer is not None and self.score(task, answer) >= self.correct_threshold

    def behaviour(self, task: Task, results: list[ToolResult]) -> dict:
        final = [r for r in results if r.done and r.error is None]
        return {"calculator_calls": sum(r.name == CALC and r.error is None for r in results),
                "score": float(final[-1].extra.get("score", 0.0)) if final else 0.0}


    def baseline(self, task: Task, seed: int = 0):
        """An oracle (a sanity ceiling, not a skill): with the calculator it first
        evaluates the question's expression when the dataset records one, then answers
        the gold answer."""
        expression = (task.payload.get("metadata") or {}).get("expression")

        def policy(results: list[ToolResult]):
            if self.tools == CALC and isinstance(expression, str) and not results:
                return CALC, {"expression": expression}
            return ANSWER, {"answer": task.answer}
        return policy
