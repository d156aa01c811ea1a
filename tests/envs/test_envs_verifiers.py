"""env=verifiers (ablate/envs/verifiers_env.py): a verifiers v1 taskset written against
verifiers' documented API (tests/envs_external/vf_arith.py: a tool and scoring functions)
as an ablate environment. Runs where verifiers==0.4.0 is installed (its own venv,
~/.cache/ablate/verifiers-venv, built by .ci/run; docs/environments.md); skipped elsewhere,
except the missing-package test, which runs everywhere."""
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from ablate.apps.cli import compose_config, normalise_overrides
from ablate.envs import EnvError, make_env, tool_names
from ablate.protocol.environment import answer_from_text, prompt_tools
from ablate.harness.config import HarnessConfig, ModeConfig
from ablate.harness.rollout import rollout
from ablate.samplers.hf import HFSampler

import test_harness_util as U

REPO = Path(__file__).resolve().parents[2]
TASKSET = "envs_external.vf_arith:ArithTaskset"
needs_vf = pytest.mark.skipif(
    importlib.util.find_spec("verifiers") is None,
    reason="needs verifiers==0.4.0 (its own venv: .ci/run builds ~/.cache/ablate/"
           "verifiers-venv; docs/environments.md)")


def env_of(**cfg):
    return make_env(OmegaConf.create({"name": "verifiers", "taskset": TASKSET,
                                      "train_tasks": 8, "test_tasks": 4, **cfg}))


def rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


# ------------------------------------------------------------------ the verifiers API
@needs_vf
def test_conformance_of_the_verifiers_api():
    """Exactly the verifiers 0.4.0 surface verifiers_env.py uses; a new verifiers that
    moves one of these fails here first (the adapter pins verifiers==0.4.0)."""
    import verifiers
    import verifiers.v1 as vf
    from mcp import Client
    from mcp.server.mcpserver import MCPServer
    from verifiers.v1.graph import MessageNode
    from verifiers.v1.harnesses.utils.mcp import mcp_content_to_chat_content
    from verifiers.v1.state import state_cls
    from verifiers.v1.types import content_text
    from verifiers.v1.utils.generic import concrete_type
    from verifiers.v1.utils.loaders import taskset_class
    import envs_external.vf_arith as A

    assert verifiers.__version__ == "0.4.0" and callable(taskset_class)
    assert concrete_type(A.ArithTaskset, vf.TasksetConfig, origin=vf.Taskset) is A.ArithConfig
    ts = A.ArithTaskset(A.ArithConfig.model_validate({"num_tasks": 3}))
    assert ts.bounded and [t.data.idx for t in ts] == [0, 1, 2]
    assert sorted(t.data.idx for t in ts.shuffle(0)) == [0, 1, 2]   # a view, same tasks
    task = next(iter(ts))
    assert isinstance(task.key, str) and task.data.prompt.startswith("What is 0 + 0")
    assert task.data.system_prompt and content_text("x") == "x"
    assert [f.__name__ for f in task.hooks("reward")] == ["exact", "used_tool"]
    assert [f._vf_weight for f in task.hooks("reward")] == [1.0, 0.5]
    assert A.ArithTaskset.toolsets(ts.config) == []
    [toolset] = type(task).toolsets(task.config)
    assert toolset.server_name == "calc" and toolset.config.url is None
    assert state_cls(type(toolset)) is vf.State

    async def serve_and_call():
        await toolset.setup()
        await toolset.setup_task(task.data)
        server = MCPServer(toolset.server_name)
        toolset.register(server)
        async with Client(server) as client:
            tools = (await client.list_tools()).tools
            ok = await client.call_tool("add", {"a": 2, "b": 3})
            bad = await client.call_tool("add", {"a": "x", "b": 3})
        return tools, ok, bad
    import asyncio
    tools, ok, bad = asyncio.run(serve_and_call())
    assert [(t.name, t.description, sorted(t.input_schema["properties"])) for t in tools] \
        == [("add", "Add two integers.", ["a", "b"])]
    assert mcp_content_to_chat_content(ok.content) == "5" and not ok.is_error
    assert bad.is_error

    call = vf.ToolCall(id="c0", name="calc_add", arguments='{"a": 0, "b": 0}')
    path = [vf.SystemMessage(content="s"), vf.UserMessage(content="q"),
            vf.AssistantMessage(content=None, tool_calls=[call]),
            vf.ToolMessage(content="0", tool_call_id="c0", name="calc_add"),
            vf.AssistantMessage(content=" 0 ")]
    trace = vf.Trace(task=vf.TraceTask(type="ArithTask", data=task.data, key=task.key),
                     agent=vf.AgentInfo(config=vf.AgentConfig()),
                     nodes=[MessageNode(parent=i - 1 if i else None, message=m,
                                        sampled=m.role == "assistant")
                            for i, m in enumerate(path)])
    asyncio.run(task.score(trace))
    assert {k: (r.score, r.weight) for k, r in trace.rewards.items()} == {
        "exact": (1.0, 1.0), "used_tool": (1.0, 0.5)}
    assert trace.reward == 1.5 and trace.metrics == {"reply_chars": 1.0}


# ------------------------------------------------------------------ tasks, tools, judge
@needs_vf
def test_tasks_prompts_tools_and_disjoint_splits():
    env = env_of()
    train, test = env.tasks("train"), env.tasks("test")
    assert [t.metadata["idx"] for t in test] == [0, 1, 2, 3]     # the head is held out
    assert [t.metadata["idx"] for t in train] == list(range(4, 12))
    assert {t.metadata["key"] for t in train}.isdisjoint(t.metadata["key"] for t in test)
    assert train[0].prompt == "What is 4 + 4? Reply with the number." and train[0].answer == "8"
    assert env.system_prompt() == "You add numbers. Use the tool."
    assert tool_names(env) == ("calc_add", "answer")
    assert [s["function"]["name"] for s in prompt_tools(env)] == ["calc_add"]
    other = env_of(test_options={"offset": 100})     # the test split from its own config
    assert [t.prompt.split("?")[0] for t in other.tasks("test")][:1] == ["What is 100 + 2"]
    with pytest.raises(EnvError, match=r"gave only 36 distinct train tasks of "
                                       r"env.train_tasks=100; ask for fewer"):
        env_of(train_tasks=100).tasks("train")


@needs_vf
@pytest.mark.parametrize("reply,use_tool,rewards", [
    ("8", False, {"exact": [1.0, 1.0], "used_tool": [0.0, 0.5]}),
    (" 8\n", True, {"exact": [1.0, 1.0], "used_tool": [1.0, 0.5]}),
    ("9", True, {"exact": [0.0, 1.0], "used_tool": [1.0, 0.5]}),
    ("eight", False, {"exact": [0.0, 1.0], "used_tool": [0.0, 0.5]}),
])
def test_the_judge_is_the_tasksets_score(reply, use_tool, rewards):
    """Hand-picked replies: the rewards are the taskset's own (exact: reply == 8; used_tool:
    the add tool was called); correct iff their weighted sum >= env.correct_threshold."""
    env = env_of()
    task = env.tasks("train")[0]                 # What is 4 + 4?
    state = env.reset(task)
    if use_tool:
        assert env.call(state, "calc_add", {"a": 4, "b": 4}).observation == "8"
    result = env.call(state, "answer", answer_from_text(env, reply))
    total = sum(s * w for s, w in rewards.values())
    assert result.done and result.extra["rewards"] == rewards
    assert result.extra["vf_reward"] == total and result.extra["metrics"] == {
        "reply_chars": float(len(reply.strip()))}
    assert env.is_correct(task, result.answer, state) is (total >= 1.0)
    assert env_of(correct_threshold=1.5).is_correct(task, result.answer, state) is \
        (total >= 1.5)
    assert env.behaviour(task, [result])["vf_reward"] == total


@needs_vf
def test_tool_errors_are_observations():
    env = env_of()
    state = env.reset(env.tasks("train")[0])
    bad = env.call(state, "calc_add", {"a": "x", "b": 1})      # MCP's own validation
    assert bad.error and "validation error" in bad.observation and not bad.state_changed
    missing = env.call(state, "calc_add", {"a": 1})             # ablate's schema check
    assert missing.error
    first, again = (env.call(state, "calc_add", {"a": 1, "b": 2}) for _ in range(2))
    assert first.state_changed and not again.state_changed and again.observation == "3"


@needs_vf
def test_reward_components_and_weight_overrides():
    from ablate.core.errors import ConfigError
    from ablate.envs.verifiers_env import vf_reward
    env = env_of()
    task = env.tasks("train")[0]
    state = env.reset(task)
    env.call(state, "calc_add", {"a": 4, "b": 4})
    done = env.call(state, "answer", {"answer": "8"})
    episode = type("Ep", (), {"results": [done], "task": task})()
    assert vf_reward(episode, None) == (1.5, {"exact": 1.0, "used_tool": 0.5})
    cfg = OmegaConf.create({"name": "vf_reward", "weights": {"used_tool": 2.0}})
    assert vf_reward(episode, cfg) == (3.0, {"exact": 1.0, "used_tool": 2.0})
    cut = type("Ep", (), {"results": [], "task": task})()       # no reply: declared, 0
    assert vf_reward(cut, None) == (0.0, {"exact": 0.0, "used_tool": 0.0})
    with pytest.raises(ConfigError, match=r"^reward.weights.nope is not a reward of the "
                                          r"taskset; its rewards: \['exact', 'used_tool'\]"):
        vf_reward(episode, OmegaConf.create({"name": "vf_reward", "weights": {"nope": 1}}))


# ------------------------------------------------------------------ token exactness
class Recording:
    """A sampler that records every (prompt ids, completion ids) it returned."""

    def __init__(self, inner):
        self.inner, self.calls = inner, []

    def generate(self, prompts, **kw):
        outs = self.inner.generate(prompts, **kw)
        self.calls += [(list(p), list(o.ids)) for p, o in zip(prompts, outs)]
        return outs

    def __getattr__(self, name):
        return getattr(self.inner, name)


def add_then_reply(prompt, turn):
    return U.chat.format_tool_call("calc_add", {"a": 4, "b": 4}) if turn == 0 else "8"


@needs_vf
@pytest.mark.parametrize("kind", ["hf", "scripted"])
def test_training_ids_are_the_sampled_ids(kind):
    """No re-tokenisation: every generated position of an episode's training sequence
    holds exactly the ids the sampler returned, and the sampler's prompts are prefixes
    of it (the random tiny Qwen3 through HFSampler; a scripted tool call, then a reply)."""
    tok = U.tokenizer()
    inner = HFSampler(U.tiny_model(tok, seed=3), tok) if kind == "hf" else \
        U.ScriptedSampler(tok, add_then_reply)
    sampler, env = Recording(inner), env_of()
    eps = rollout(env.tasks("train")[:2], group_size=2, sampler=sampler, tokenizer=tok,
                  env=env, harness_cfg=HarnessConfig(max_new_tokens_per_turn=64),
                  mode_cfg=ModeConfig(), max_turns=3, temperature=1.0, seed=0)
    assert len(eps) == 4 and all(len(ep.segments) == 1 for ep in eps)
    covered = [set() for _ in eps]
    for prompt, completion in sampler.calls:     # each call lands verbatim in an episode
        span = range(len(prompt), len(prompt) + len(completion))
        hits = [i for i, ep in enumerate(eps)
                if ep.segments[0].ids[:span.stop] == prompt + completion]
        assert hits, "a sampled completion is not in any training sequence"
        for i in hits:
            covered[i] |= set(span)
    for ep, cov in zip(eps, covered):            # and is all that is trained on
        assert cov == {i for i, m in enumerate(ep.segments[0].mask) if m} and cov
    if kind == "scripted":
        assert all([c.name for c in ep.calls] == ["calc_add", "answer"] for ep in eps)
        assert all(ep.final_answer == "8" for ep in eps[:2])     # task 0: 4 + 4


# ------------------------------------------------------------------ a 1-step cell
@needs_vf
def test_one_step_cell_with_reward_components(tmp_path):
    """The embedded tiny model (masks off: they are built for the email world), ~15 s."""
    from ablate.loop.cell import run_cell
    cfg = compose_config(normalise_overrides([
        "env=verifiers", f"env.taskset={TASKSET}", "env.train_tasks=8", "env.test_tasks=4",
        "env.max_turns=2", "trainer.max_steps=1", "trainer.tasks_per_step=2",
        "trainer.group_size=2", "eval.num_tasks=2", "eval.samples=1", "eval.greedy=false",
        "harness.action_masking=false", "harness.answer_masking=false",
        "harness.keyword_masking=false", "harness.max_new_tokens_per_turn=16",
        "reward.weights.used_tool=2.0", "run.quiet=true"]))
    assert cfg.reward.name == "vf_reward"              # the environment's default_reward
    run_cell(cfg, tmp_path)
    assert (tmp_path / "COMPLETE").exists()
    [train] = rows(tmp_path / "metrics.jsonl")
    assert train["step"] == 1 and train["episodes"] == 4
    assert {"reward/exact", "reward/used_tool"} <= set(train)
    evals = rows(tmp_path / "eval.jsonl")
    assert len(evals) == 4 and all("vf_reward" in r and "reply_chars" in r for r in evals)
    for r in evals:       # each row's reward is the sum of the taskset's components
        assert r["reward"] == pytest.approx(r["reward/exact"] + r["reward/used_tool"]
                                            + r["reward/format_penalty"])
        assert r["reward/used_tool"] in (0.0, 2.0)          # reward.weights.used_tool=2
        assert r["correct"] is (r["vf_reward"] >= 1.0)
    described = json.loads((tmp_path / "environment.json").read_text())
    assert described["tools"] == ["calc_add", "answer"] and described["name"] == "verifiers"


# ------------------------------------------------------------------ one-line errors
@needs_vf
@pytest.mark.parametrize("path,needle", [
    ("no_such_pkg.mod:Taskset", "cannot import it (ModuleNotFoundError"),
    ("envs_external.vf_arith:Nope", "cannot import it (AttributeError"),
    ("envs_external.vf_arith:ArithData", "is not a verifiers.v1 Taskset subclass"),
])
def test_a_bad_taskset_path_is_one_line_naming_the_key(path, needle):
    with pytest.raises(EnvError) as err:
        env_of(taskset=path)
    line = str(err.value)
    assert line.startswith(f"env.taskset={path!r}") and needle in line and "\n" not in line
    with pytest.raises(EnvError, match=r"^env.options.num_tasks: Input should be a valid "
                                       r"integer.*its fields: .*num_tasks, offset"):
        env_of(options={"num_tasks": "many"})


def test_without_the_package_one_line_with_the_install_command(tmp_path):
    """Runs everywhere: a shadow package stands in for a missing verifiers."""
    shadow = tmp_path / "shadow" / "verifiers"
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text("raise ImportError('simulated: not installed')\n")
    env = dict(os.environ, WANDB_MODE="disabled",
               PYTHONPATH=f"{shadow.parent}{os.pathsep}{REPO}")
    proc = subprocess.run([sys.executable, "-m", "ablate", "env=verifiers",
                           f"env.taskset={TASKSET}", f"hydra.run.dir={tmp_path / 'cell'}"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert proc.stderr.strip().splitlines()[-1] == (
        "ablate: error: env=verifiers needs the verifiers package: pip install "
        "'ablate[verifiers]' (or: pip install verifiers==0.4.0, best in its own venv: "
        "docs/environments.md)")
    assert not (tmp_path / "cell").exists()
