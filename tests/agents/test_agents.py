"""Agents (ablate.agents): LATS and Reflexion against their definitions.

LATS with a node budget of 1 is one rollout from the root (token for token the harness's
rollout); its trees never exceed their budget; the same seed grows the same tree; the
episodes it returns are real rollouts (a replayed prefix keeps the log-probabilities the
model gives it). Reflexion: the reflection of attempt k is in attempt k+1's prompt and
nowhere else (Ω = 1), in the Ω following attempts otherwise; success@k counts it. Both
run a 2-step cell and resume after SIGKILL (tests/algos/test_algos_rft.py's helper)."""
from __future__ import annotations

import json
import random
import re
from types import SimpleNamespace

import pytest
import torch

import test_harness_util as U
from test_algos_rft import cell_resumes_after_sigkill
from test_harness import _recompute
from ablate.agents import AGENTS, LATS, Reflexion, agent_for, build_agent, run_rollout
from ablate.agents.lats import RATE_ASK, Node, ReplayError, Tree, siblings
from ablate.agents.reflexion import MEMORY_HEAD, REFLECTION_ASK, REFLECTION_SYSTEM
from ablate.agents.replay import turn_actions
from ablate.loop.scoring import eval_rows, score
from ablate.apps.cli import compose_config, normalise_overrides
from ablate.loop.config import ConfigError, validate
from ablate.envs.email import EmailEnv
from ablate.envs.email.env import as_task
from ablate.envs.email.judge import make_judge
from ablate.envs import run_episode, scripted
from ablate.envs.coderepair.env import CodeRepairEnv
from ablate.loop.eval_metrics import summarise
from ablate.harness import chat
from ablate.samplers.hf import HFSampler

torch.set_num_threads(1)


def policy_for(db, sampler, overrides=(), compact=False):
    cfg = compose_config(normalise_overrides(["env.max_turns=3", *overrides]))
    env = EmailEnv.over_db(db, judge=make_judge(cfg.env.judge))
    if compact:
        env.tool_schemas = U.compact_schemas
    pol = SimpleNamespace(sampler=sampler, tokenizer=U.tokenizer(), env=env, cfg=cfg)
    return pol, (lambda eps: score(eps, env, cfg.reward))


# --- LATS on a real tiny model ------------------------------------------------------------

@pytest.fixture(scope="module")
def primed(tmp_path_factory):
    db = U.make_db(tmp_path_factory.mktemp("lats_db"))
    model, _ = U.primed_model(U.tokenizer(), db, steps=40)
    return db, model


def lats_policy(primed, mode="instruct"):
    db, model = primed
    return policy_for(db, HFSampler(model, U.tokenizer()),
                      ["harness.max_tokens_per_episode=80", f"+mode={mode}",
                       "mode.max_think_tokens=16"], compact=True)


def same_episode(a, b):
    assert [s.ids for s in a.segments] == [s.ids for s in b.segments]
    assert [s.mask for s in a.segments] == [s.mask for s in b.segments]
    assert [s.logprobs for s in a.segments] == [s.logprobs for s in b.segments]
    assert [t.text for t in a.turns] == [t.text for t in b.turns]
    assert (a.final_answer, a.end_reason) == (b.final_answer, b.end_reason)


@pytest.mark.parametrize("mode", ["instruct", "thinking"])
def test_lats_with_budget_one_is_a_single_rollout(primed, mode):
    pol, sc = lats_policy(primed, mode)
    got = LATS(node_budget=1, children=3).act(pol, U.TASKS, 1, temperature=1.0, seed=11,
                                               score=sc)
    plain = run_rollout(pol, U.TASKS, 1, temperature=1.0, seed=11)
    assert len(got) == len(plain) == 2
    for g, p in zip(got, plain):
        same_episode(g, p)
        assert g.env_metrics["lats_nodes"] == 1 and g.env_metrics["lats_rollouts"] == 1
        assert g.env_metrics["agent_tokens"] == p.response_tokens


@pytest.mark.parametrize("budget,children", [(2, 2), (3, 2), (5, 3)])
def test_lats_tree_never_exceeds_its_budget_and_is_a_function_of_the_seed(primed, budget,
                                                                          children):
    pol, sc = lats_policy(primed)
    agent = LATS(node_budget=budget, children=children, stop_on_success=False)

    def trees(seed):
        return agent.search(pol, U.TASKS, 2, temperature=1.0, seed=seed, score=sc)
    first, again, other = trees(3), trees(3), trees(4)
    for t in first:
        assert t.size <= budget
        assert t.root.visits == len(t.episodes)      # every rollout backpropagated once
        assert t.tokens == sum(e.response_tokens - sum(len(a.ids) for a in
                                                       turn_actions(e)[:leaf.depth])
                               for _, e, leaf in t.episodes)
    assert max(t.size for t in first) == budget      # the budget is used, not undershot
    assert [t.root.shape() for t in first] == [t.root.shape() for t in again]
    assert [t.root.shape() for t in first] != [t.root.shape() for t in other]


def test_lats_sibling_groups_for_dpo(primed):
    """train_episodes=siblings (training only): every rollout, one group per expanded
    node; a group's episodes share the replayed turns; DPO pairs stay inside a group."""
    from ablate.algos.dpo import group_pairs
    pol, sc = lats_policy(primed)
    agent = LATS(node_budget=5, children=2, stop_on_success=False,
                 train_episodes="siblings")
    kw = dict(temperature=1.0, seed=7, score=sc)
    assert len(agent.act(pol, U.TASKS, 1, **kw)) == 2         # evaluation: one per tree
    agent.training = True
    assert len(agent.act(pol, U.TASKS, 1, **kw)) == sum(
        len(t.episodes) for t in agent.search(pol, U.TASKS, 1, **kw))
    trees = agent.search(pol, U.TASKS, 1, **kw)
    leaf_of = {id(e): leaf for t in trees for _, e, leaf in t.episodes}
    eps = siblings(trees)
    assert len(eps) == len(leaf_of) > 2
    assert sum(e.env_metrics["agent_tokens"] for e in eps) == sum(t.tokens for t in trees)
    by_group = {}
    for e in eps:
        by_group.setdefault(e.group, []).append(e)
        leaf = leaf_of[id(e)]
        assert turn_actions(e)[:leaf.depth] == leaf.path()      # the shared prefix
    assert len(by_group) > len(trees)                        # nodes below the roots too
    for members in by_group.values():
        assert [e.sample for e in members] == list(range(len(members)))
        assert len({id(leaf_of[id(e)]) for e in members}) == 1
    rewards = [r for r, _ in sc(eps)]
    for w, lose in group_pairs(eps, rewards, [e.group for e in eps], "extremes"):
        assert leaf_of[id(eps[w])] is leaf_of[id(eps[lose])]


@pytest.mark.parametrize("mode", ["instruct", "thinking"])
def test_lats_episodes_are_real_rollouts(primed, mode):
    """Episodes grown from deep nodes: recorded log-probabilities (replayed turns
    included) are what the model gives their tokens in context, and the action masks;
    in thinking mode each turn is its own segment (earlier thinking stripped)."""
    pol, sc = lats_policy(primed, mode)
    _, model = primed
    trees = LATS(node_budget=6, children=2, stop_on_success=False).search(
        pol, U.TASKS, 1, temperature=1.0, seed=5, score=sc)
    deep = [e for t in trees for _, e, leaf in t.episodes if leaf.depth > 0]
    assert deep, "no episode grew below the root"
    for e in deep:
        assert len(e.segments) == (e.num_turns if mode == "thinking" else 1)
        for seg in e.segments:
            lp = _recompute(model, seg, 1.0)
            m = torch.tensor(seg.mask, dtype=torch.bool)
            assert torch.allclose(lp[m], torch.tensor(seg.logprobs)[m], atol=2e-4)


class Forking(U.ScriptedSampler):
    """Plays a scripted fix turn by turn, or on rows the call's seed picks (a fixed
    function of seed, row and turn) a detour call: a tree with branches, no model."""

    def __init__(self, steps, detour):
        super().__init__(U.tokenizer(), None)
        self.steps, self.detour = steps, detour

    def generate(self, prompts, *, max_new_tokens, seed=None, **kw):
        outs = []
        for row, p in enumerate(prompts):
            turn = self.tok.decode(p).count("<|im_start|>assistant") - 1
            pick = random.Random(f"{seed}-{row}-{turn}").random() < 0.4
            self.script = lambda text, t: self.detour if pick else \
                self.steps[min(t, len(self.steps) - 1)]
            outs += super().generate([p], max_new_tokens=[max_new_tokens[row]], seed=seed)
        return outs


def test_lats_replays_a_stateful_environment():
    """Code repair keeps edits in its state: every episode of the tree (replayed prefixes
    included) ends in the state its own calls give on a fresh reset."""
    env = CodeRepairEnv(gen_seed=0, train_tasks=2, test_tasks=1, max_turns=10)
    task = env.tasks("train")[0]
    fix = run_episode(env, task, env.baseline(task, 0), 10)
    assert fix.correct and any(n == "replace_line" for n, _, _ in fix.steps())
    cfg = compose_config(["env=coderepair", "env.max_turns=10", "reward.name=outcome",
                          "harness.action_masking=false", "harness.answer_masking=false",
                          "harness.keyword_masking=false"])
    sampler = Forking([chat.format_tool_call(n, a) for n, a, _ in fix.steps()],
                      chat.format_tool_call("run_tests", {}))
    pol = SimpleNamespace(sampler=sampler, tokenizer=U.tokenizer(), env=env, cfg=cfg)
    trees = LATS(node_budget=8, children=2, stop_on_success=False).search(
        pol, [task], 1, temperature=1.0, seed=2, score=lambda e: score(e, env, cfg.reward))
    tree = trees[0]
    assert tree.size == 8 and max(leaf.depth for _, _, leaf in tree.episodes) >= 2
    for _, e, _ in tree.episodes:
        calls = [(c.name, c.arguments) for c in e.calls]
        again = run_episode(env, task, scripted(calls), len(calls))
        assert again.state.files == e.state.files
        assert [r.observation for r in again.results] == [c.observation for c in e.calls]
    assert any(e.correct for _, e, _ in tree.episodes)


def test_lats_policy_value_is_the_policys_rating_without_the_judge(tmp_path):
    solve, c = U.demo_script(U.demo_steps()), chat.format_tool_call
    detour = c("search_inbox", {"keywords": ["parking"]})

    def script(prompt, turn):
        if RATE_ASK in prompt:
            return "7 of 10" if "Maria Lopez" in prompt else "2"
        return solve(prompt, turn) if turn != 1 or U.TASKS[0].question in prompt else detour
    sampler = U.ScriptedSampler(U.tokenizer(), script)
    pol, _ = policy_for(U.make_db(tmp_path), sampler, ["env.max_turns=4"])

    def judge(eps):
        raise AssertionError("value=policy must not call the judge")
    trees = LATS(node_budget=3, children=1, value="policy").search(
        pol, U.TASKS, 1, temperature=1.0, seed=0, score=judge)
    for t, rating in zip(trees, (0.2, 0.7)):
        assert [v for v, _, _ in t.episodes] == [rating] * 3
        assert t.root.value_sum == pytest.approx(3 * rating) and t.size == 3
        rated = sum(len(U.tokenizer().encode(
            "7 of 10" if rating == 0.7 else "2", add_special_tokens=False)) + 1 for _ in range(3))
        assert t.tokens == rated + sum(e.response_tokens - sum(
            len(a.ids) for a in turn_actions(e)[:leaf.depth]) for _, e, leaf in t.episodes)
    assert sum(RATE_ASK in p for p in sampler.prompts) == 6


def test_lats_raises_when_replay_diverges():
    pol = SimpleNamespace()
    tree = Tree(U.TASKS[0], 0, 0)
    ep = SimpleNamespace(segments=[SimpleNamespace(ids=[1, 2, 3, 4, 5], mask=[0, 1, 0, 1, 1],
                                                   logprobs=[0, -1, 0, -1, -1])],
                         num_turns=2, response_tokens=3, correct=False)
    LATS().grow(tree, tree.root, ep, 0.5)
    child = tree.root.children[0]
    assert child.action.ids == (2,) and not child.terminal and tree.size == 1
    other = SimpleNamespace(**{**vars(ep), "segments": [SimpleNamespace(
        ids=[1, 9, 3, 4], mask=[0, 1, 0, 1], logprobs=[0, -1, 0, -1])]})
    with pytest.raises(ReplayError, match="not deterministic"):
        LATS().grow(tree, child, other, 0.1)
    del pol


def test_uct_prefers_value_then_exploration():
    root = Node(visits=3)
    a, b = Node(parent=root, visits=2, value_sum=1.0), Node(parent=root, visits=1,
                                                            value_sum=0.0)
    root.children = [a, b]
    assert a.uct(0.0) == 0.5 and b.uct(0.0) == 0.0
    # Zhou et al. eq. 1: c = 1: 0.5 + sqrt(ln 3 / 2) = 1.24 > 0 + sqrt(ln 3) = 1.05;
    # c = 2: 1.98 < 2.10, the less visited child wins
    assert a.uct(1.0) == pytest.approx(0.5 + (1.0986122886681098 / 2) ** 0.5)
    assert Tree(None, 0, 0, root=root).select(1.0) is a
    assert Tree(None, 0, 0, root=root).select(2.0) is b


# --- Reflexion (scripted policy: the prompts are what is checked) -------------------------

WRONG = chat.format_tool_call("return_final_answer", {"answer": "nobody", "sources": []})


class Recorder(U.ScriptedSampler):
    """Writes a numbered reflection when asked for one; otherwise plays `attempt`."""

    def __init__(self, attempt):
        self.count = 0
        self.reflections: list[tuple[str, str]] = []     # (reflection, its prompt)
        super().__init__(U.tokenizer(), self.reply)
        self.attempt = attempt

    def reply(self, prompt, turn):
        if REFLECTION_ASK in prompt:
            self.count += 1
            text = f"Lesson {self.count}: search the budget first"
            self.reflections.append((text, prompt))
            return text
        return self.attempt(prompt, turn)


# the generic Tasks a cell hands the agent (Reflexion rewrites their prompt)
TASKS = [as_task(t) for t in U.TASKS]


def run_reflexion(tmp_path, attempt, **kw):
    sampler = Recorder(attempt)
    pol, sc = policy_for(U.make_db(tmp_path), sampler)
    eps = Reflexion(**kw).act(pol, TASKS, 2, temperature=1.0, seed=0, score=sc)
    return eps, sampler, sc


def attempt_prompts(sampler):
    return [p for p in sampler.prompts if REFLECTION_ASK not in p]


@pytest.mark.parametrize("omega", [1, 2])
def test_reflection_of_attempt_k_is_in_the_next_prompts_only(tmp_path, omega):
    eps, sampler, _ = run_reflexion(tmp_path, lambda p, t: WRONG, max_attempts=3,
                                    memory_size=omega)
    assert len(sampler.reflections) == 2 * 2 * 2            # 2 tasks x 2 samples x (3-1)
    attempts = attempt_prompts(sampler)
    assert len(attempts) == 2 * 2 * 3                       # one turn per attempt
    for text, asked in sampler.reflections:
        where = [p for p in sampler.prompts if text in p]
        lesson = int(re.search(r"Lesson (\d+)", text).group(1))
        second = lesson <= 4                                # reflections 1-4 follow attempt 1
        assert len(where) == (1 if omega == 1 or not second else 2)
        assert all(p in attempts for p in where)            # never in a reflection prompt
        question = next(t.question for t in U.TASKS if t.question in asked)
        assert all(question in p and MEMORY_HEAD in p for p in where)
    # the first attempts carry no memory; each later one exactly min(k-1, Ω) reflections
    counts = sorted(len(re.findall(r"Lesson \d+", p)) for p in attempts)
    assert counts == sorted([0] * 4 + [1] * 4 + [min(2, omega)] * 4)
    for e in eps:                                          # the last attempt is returned
        assert e.env_metrics["reflexion_solved_at"] == 0
        assert e.task in TASKS and not e.correct
        text = U.tokenizer().decode(e.segments[0].ids)
        assert len(re.findall(r"Lesson \d+", text)) == min(2, omega)


def test_reflexion_success_at_attempt(tmp_path):
    """Solves a task only once a reflection is in its prompt: success@1 0, @2 and @3 1."""
    solve = U.demo_script(U.demo_steps())
    eps, sampler, _ = run_reflexion(
        tmp_path, lambda p, t: solve(p, t) if MEMORY_HEAD in p else WRONG, max_attempts=3)
    assert len(sampler.reflections) == 4 and all(e.correct for e in eps)
    rows = eval_rows(0, eps, [(1.0, {})] * len(eps))
    s = summarise(0, rows)
    assert s["eval/reflexion_success@1"] == 0.0
    assert s["eval/reflexion_success@2"] == s["eval/reflexion_success@3"] == 1.0
    spent = [e.env_metrics["agent_tokens"] for e in eps]
    assert all(n > e.response_tokens for n, e in zip(spent, eps))   # attempts + reflection
    assert s["eval/agent_tokens"] == pytest.approx(sum(spent) / len(spent))


def test_reflexion_with_one_attempt_is_react(tmp_path):
    solve = U.demo_script(U.demo_steps())
    eps, sampler, _ = run_reflexion(tmp_path, solve, max_attempts=1)
    (tmp_path / "b").mkdir()
    pol, _ = policy_for(U.make_db(tmp_path / "b"), U.ScriptedSampler(U.tokenizer(), solve))
    for g, p in zip(eps, run_rollout(pol, TASKS, 2, temperature=1.0, seed=0)):
        same_episode(g, p)
    assert not sampler.reflections


CHATML = ("{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n"
          "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")


def test_reflexion_uses_the_models_template_and_tool_format(tmp_path):
    """model.chat_template (a plain ChatML template: no think block, no tool support, so
    the json_text tool format) reaches every attempt and every reflection prompt."""
    (tmp_path / "chatml.jinja").write_text(CHATML)
    wrong = json.dumps({"name": "return_final_answer",
                        "arguments": {"answer": "nobody", "sources": []}})
    sampler = Recorder(lambda p, t: wrong)
    pol, sc = policy_for(U.make_db(tmp_path), sampler,
                         [f"model.chat_template={tmp_path / 'chatml.jinja'}"])
    eps = Reflexion(max_attempts=2).act(pol, TASKS, 1, temperature=1.0, seed=0, score=sc)
    assert len(sampler.reflections) == 2 and all(e.final_answer == "nobody" for e in eps)
    assert all("<think>" not in p for p in sampler.prompts)     # not the tiny template
    assert all("You can call these tools (JSON schemas)" in p for p in attempt_prompts(sampler))
    assert all(p.startswith("<|im_start|>system\n" + REFLECTION_SYSTEM)
               for _, p in sampler.reflections)


# --- the registry and the config group -------------------------------------------------------

def test_agent_group_names_come_from_the_registry():
    assert {"react", "reflexion", "lats"} <= set(AGENTS)
    for name in ("react", "reflexion", "lats"):
        cfg = compose_config([f"agent={name}"])
        validate(cfg)
        assert build_agent(cfg.agent).name == name
    assert agent_for(compose_config([]), True) is None                 # react: the harness
    assert agent_for(compose_config(["agent=lats"]), False) is None    # evaluation only
    assert agent_for(compose_config(["agent=lats", "agent.train=true"]), False).name == "lats"
    with pytest.raises(ConfigError, match=r"agent.name='mcts' is not one of .*lats"):
        validate(compose_config(["agent.name=mcts"]))
    with pytest.raises(ConfigError, match="agent.lats.node_budget=0"):
        validate(compose_config(["agent=lats", "agent.lats.node_budget=0"]))


# --- cells ---------------------------------------------------------------------------------------

def test_reflexion_cell_evaluates_and_trains_through_the_agent(tmp_path, monkeypatch):
    """In process: the cell's evaluation rows and summary carry the agent's metrics, and
    its training rows count the agent's tokens (agent.train=true, RFT)."""
    import json
    from ablate.loop.cell import run_cell
    from test_hardening_resume import TINY
    monkeypatch.setenv("ABLATE_CACHE", str(tmp_path / "cache"))
    cfg = compose_config(normalise_overrides([
        *TINY, "trainer.max_steps=1", "eval.at_start=false", "eval.greedy=false",
        "agent=reflexion", "agent.train=true", "agent.reflexion.max_attempts=2",
        "+algo=rft"]))
    summary = run_cell(cfg, tmp_path / "cell")["final_eval"]
    read = (lambda n: [json.loads(x) for x in
                       (tmp_path / "cell" / n).read_text().splitlines() if x])
    evals, (row,) = read("eval.jsonl"), read("metrics.jsonl")
    assert {"eval/reflexion_success@1", "eval/reflexion_success@2",
            "eval/agent_tokens"} <= set(summary)
    assert all(r["reflexion_max_attempts"] == 2 for r in evals)
    assert summary["eval/reflexion_success@2"] >= summary["eval/reflexion_success@1"]
    assert "rft/kept" in row and row["generated_tokens"] >= row["episodes"]


# --- a 2-step cell, resumed after SIGKILL ------------------------------------------------------

@pytest.mark.heavy     # ~90 s each on 2 cores (three cells); the in-process cell above is fast
@pytest.mark.parametrize("agent,key", [("lats", "eval/lats_nodes"),
                                       ("reflexion", "eval/reflexion_success@2")])
def test_agent_runs_a_cell_as_rft_data_source_and_resumes_after_sigkill(agent, key, tmp_path):
    import json
    rows = cell_resumes_after_sigkill(
        [f"agent={agent}", "agent.train=true", "+algo=rft", "agent.lats.node_budget=3",
         "agent.reflexion.max_attempts=2"], tmp_path)
    assert [r["step"] for r in rows] == [1, 2] and all("rft/kept" in r for r in rows)
    evals = [json.loads(x) for x in (tmp_path / "ref" / "eval.jsonl").read_text().split("\n")
             if x]
    assert evals and all(r["agent_tokens"] >= r["response_tokens"] for r in evals)
    summary = json.loads((tmp_path / "ref" / "summary.json").read_text())
    assert key in summary["final_eval"]
