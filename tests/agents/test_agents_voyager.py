"""agent=voyager (ablate/agents/voyager.py): a skill is stored only after it verifies; the
library retrieves a solved task's skill for a paraphrase (FTS5/BM25); use_skill replays
through Environment.call (the tool log and state changes of the same calls made
directly); a cell killed mid-step resumes with the library of the uninterrupted run, row
for row."""
from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
import torch

import test_harness_util as U
from ablate.agents import Voyager, agent_for, build_agent
from ablate.agents.embedding import Embedder
from ablate.agents.library import SkillLibrary, rrf, unpack
from ablate.agents.voyager import RETRY_HEAD, SKILLS_HEAD, USE_SKILL, SkillEnv
from ablate.apps.cli import compose_config, normalise_overrides
from ablate.envs import run_episode, scripted, tool_names
from ablate.envs.coderepair.env import CodeRepairEnv
from ablate.envs.email import EmailEnv
from ablate.agents.skills import verify
from ablate.harness import chat
from ablate.loop.config import ConfigError, validate
from ablate.loop.scoring import score

torch.set_num_threads(1)
CODE = ["env=coderepair", "env.max_turns=14", "reward.name=outcome",
        "harness.action_masking=false", "harness.answer_masking=false",
        "harness.keyword_masking=false", "harness.max_new_tokens_per_turn=400",
        "harness.max_tokens_per_episode=6000"]


class RowScript(U.ScriptedSampler):
    """Plays `scripts[row]` turn by turn (row: the prompt's place in the call, which is
    the episode's while all run equally long); a prompt holding `retry_marker` plays
    `retry` instead."""

    def __init__(self, scripts, retry=None, retry_marker=RETRY_HEAD):
        super().__init__(U.tokenizer(), None)
        self.scripts, self.retry, self.marker = scripts, retry, retry_marker

    def generate(self, prompts, *, max_new_tokens, seed=None, **kw):
        limits = max_new_tokens if isinstance(max_new_tokens, list) else \
            [max_new_tokens] * len(prompts)
        outs = []
        for row, (p, lim) in enumerate(zip(prompts, limits)):
            text = self.tok.decode(p)
            steps = self.retry if self.retry is not None and self.marker in text \
                else self.scripts[row]
            self.script = lambda _t, turn, s=steps: s[min(turn, len(s) - 1)]
            outs += super().generate([p], max_new_tokens=[lim], seed=seed)
        return outs


def code_policy(sampler, env, overrides=()):
    cfg = compose_config(normalise_overrides([*CODE, *overrides]))
    return SimpleNamespace(sampler=sampler, tokenizer=U.tokenizer(), env=env, cfg=cfg), \
        (lambda eps: score(eps, env, cfg.reward))


def fixed(env, task):
    traj = run_episode(env, task, env.baseline(task, 0), 30)
    assert traj.correct
    return [(n, a) for n, a, _ in traj.steps()]


def texts(calls):
    return [chat.format_tool_call(n, a) for n, a in calls]


def test_only_the_verified_patch_becomes_a_skill():
    """Two samples of one task: one plays the baseline's correct patch, the other a wrong
    one (the code changes, the tests fail). One skill is stored; the wrong candidate is
    retried once (max_retries=1) with the failed program and the failing tests in its
    prompt, and fails again."""
    env = CodeRepairEnv(gen_seed=0, train_tasks=3, test_tasks=1, max_turns=14)
    task = env.tasks("train")[0]
    good = fixed(env, task)
    path, line, _, buggy = task.payload.bugs[0]
    wrong = [("list_files", {})] * (len(good) - 2) + \
        [("replace_line", {"path": path, "line": line, "text": buggy + " + 7"}), ("submit", {})]
    sampler = RowScript([texts(good), texts(wrong)], retry=texts(wrong))
    pol, judge = code_policy(sampler, env)
    agent = Voyager(max_retries=1, top_k=2)
    agent.training = True
    eps = agent.act(pol, [task], 2, temperature=1.0, seed=0, score=judge)
    assert [e.correct for e in eps] == [True, False]
    assert len(agent.library) == 1
    (row,) = agent.library.rows()["skills"]
    assert row[6] == task.id and json.loads(row[3])["name"] == row[1]
    assert [e.env_metrics["voyager_attempts"] for e in eps] == [1, 2]
    retried = [p for p in sampler.prompts if RETRY_HEAD in p]
    assert retried and "FAILED" in retried[0] and buggy in retried[0]
    stored = agent.library.get(row[1])
    assert verify(env, task, stored).ok
    m = agent.step_metrics()
    assert m["voyager/library_size"] == 1 and m["voyager/skills_added"] == 1
    assert m["voyager/verify_failed"] == 2 and m["voyager/retries"] == 1


def email_skills(db, embedder=None):
    env = EmailEnv.over_db(db)
    plans = {"t1": [("search_inbox", {"keywords": ["budget"]}),
                    ("read_email", {"message_id": "m0"}),
                    ("return_final_answer", {"answer": "$5,000", "sources": ["m0"]})],
             "t2": [("search_inbox", {"keywords": ["Falcon"]}),
                    ("read_email", {"message_id": "m2"}),
                    ("return_final_answer", {"answer": "Maria Lopez", "sources": ["m2"]})]}
    lib = SkillLibrary(embedder)
    for t in U.TASKS:
        traj = run_episode(env, t, scripted(plans[t.id]), 5)
        skill = env.skill_of(t, traj.results)
        assert traj.correct and verify(env, t, skill).ok
        lib.add(skill, t.id, env.skill_query(t), 1)
    return env, lib


def test_retrieval_finds_the_solved_tasks_skill_for_a_paraphrase(tmp_path):
    env, lib = email_skills(U.make_db(tmp_path))
    names = {t.id: lib.rows()["skills"][i][1] for i, t in enumerate(U.TASKS)}
    for query, want in [("How large were the Houston office's project budgets in Q3?", "t1"),
                        ("Which person is leading the Falcon project?", "t2")]:
        ranked = lib.search(query, 2)
        assert len(ranked) == 2, ranked               # both match a word of the query
        assert ranked[0][0].name == names[want], ranked
        assert ranked[0][1] < ranked[1][1]          # bm25(): lower is a better match
    assert lib.search("parking", 2) == []             # no shared word, nothing offered


def test_reciprocal_rank_fusion_follows_cormack_et_al():
    """score(d) = sum_r 1/(k + rank_r(d)): in both lists beats first in one; ties by id."""
    got = rrf([[3, 1], [1, 2, 3]], k=60)
    assert [d for d, _ in got] == [1, 3, 2]
    assert got[0][1] == pytest.approx(1 / 62 + 1 / 61)
    assert got[1][1] == pytest.approx(1 / 61 + 1 / 63) and got[2][1] == pytest.approx(1 / 62)
    assert [d for d, _ in rrf([[5], [4]])] == [4, 5]           # a tie: the older skill


@pytest.fixture(scope="module")
def smollm_embedder():
    if not U.smollm_installed():
        pytest.skip("the smollm extra is not installed")
    cfg = compose_config(normalise_overrides(["model=smollm2_135m"]))
    return Embedder.from_spec("policy", cfg.model, 64)


def test_embedding_retrieval_finds_a_paraphrase_that_shares_no_word(tmp_path,
                                                                    smollm_embedder):
    """agent.voyager.embedding=policy with SmolLM2-135M (mean-pooled last hidden states):
    a paraphrase of a solved task that shares no word with any skill finds nothing by
    BM25 and the solved task's skill with the dense ranking (RRF of the two); a query
    both rankings match keeps BM25's best first and gains the other skill after it."""
    db = U.make_db(tmp_path)
    _, plain = email_skills(db)
    env, lib = email_skills(db, smollm_embedder)
    names = {t.id: lib.rows()["skills"][i][1] for i, t in enumerate(U.TASKS)}
    paraphrase = "How much money may our Texas branch spend this quarter?"
    assert plain.search(paraphrase, 2) == []                   # no shared word
    ranked = lib.search(paraphrase, 2)
    assert [s.name for s, _ in ranked] == [names["t1"], names["t2"]], ranked
    assert ranked[0][1] < ranked[1][1]                         # lower is better, as bm25()
    both = lib.search("Who is in charge of Falcon?", 2)
    assert [s.name for s, _ in both] == [names["t2"], names["t1"]]
    assert both[0][1] == pytest.approx(-2 / 61)                # first in both rankings
    (row,) = [r for r in lib.rows()["vectors"] if r[1] == "t1"]
    assert unpack(row[2]).shape == (576,)                      # SmolLM2's hidden size
    assert lib.meta("embedding") == "policy:smollm2_135m"


def test_use_skill_replays_the_calls_through_the_environment():
    """An episode that calls use_skill logs the skill's calls, each with the observation
    and state change the same calls made directly give, and ends in the same world."""
    env = CodeRepairEnv(gen_seed=0, train_tasks=2, test_tasks=1, max_turns=14)
    task = env.tasks("train")[1]
    traj = run_episode(env, task, env.baseline(task, 0), 30)
    skill = env.skill_of(task, traj.results)
    direct_calls = skill.bind()
    use = [chat.format_tool_call(USE_SKILL, {"skill": skill.name})]
    sampler = RowScript([use, texts(direct_calls)])
    pol, judge = code_policy(sampler, env)
    agent = Voyager()
    agent.training = False
    offers = {task.id: [skill]}
    (via,) = agent.rollout(pol, [task], 1, offers, temperature=1.0, seed=0)
    sampler.scripts = [texts(direct_calls)]
    direct = run_episode(env, task, scripted(direct_calls), len(direct_calls))
    assert [c.to_json() for c in via.calls] == [r.to_json() for r in direct.results]
    assert [c.state_changed for c in via.calls] == [r.state_changed for r in direct.results]
    assert via.state.files == direct.state.files and via.final_answer == "submitted"
    assert via.num_turns == 1 and via.env_metrics["voyager_skills_used"] == 1
    score([via], env, pol.cfg.reward)
    assert via.correct
    agent.library.add(skill, task.id, env.skill_query(task), 0)
    assert agent.learn(env, via) == (skill.name, None)   # the same program: credited, once
    assert len(agent.library) == 1 and via.env_metrics["voyager_skills"] == skill.name
    prompt = sampler.prompts[0]
    assert SKILLS_HEAD in prompt and skill.name in prompt and USE_SKILL in prompt
    # every replayed observation is in the tokens the model reads next: none was
    # (the episode ended with the replayed submit); a bad skill name is an error result
    bad = SkillEnv(env, offers).run_call(SkillEnv(env, offers).reset(task), USE_SKILL,
                                         {"skill": "nope"})
    assert len(bad) == 1 and "no offered skill" in bad[0].error


def test_use_skill_is_in_the_schema_the_action_masks_read():
    env = CodeRepairEnv(gen_seed=0, train_tasks=2, test_tasks=1, max_turns=14)
    task = env.tasks("train")[1]
    skill = env.skill_of(task, run_episode(env, task, env.baseline(task, 0), 30).results)
    wrapped = SkillEnv(env, {task.id: [skill]})
    ctx = wrapped.mask_candidates(wrapped.reset(task), answer_masking=True)
    assert USE_SKILL in ctx["tool_names"] and USE_SKILL in tool_names(wrapped)
    forced = ctx["grammar"]["after_name"][USE_SKILL]
    assert json.loads('{"name": "use_skill"' + forced) == {
        "name": USE_SKILL, "arguments": {"skill": skill.name}}
    none = SkillEnv(env, {})
    assert USE_SKILL not in none.mask_candidates(none.reset(task))["tool_names"]


def test_voyager_config_checks_and_one_agent_per_cell():
    with pytest.raises(ConfigError, match="agent.train"):
        validate(compose_config(normalise_overrides(["agent=voyager", "agent.train=false"])))
    with pytest.raises(ConfigError, match="algo.curriculum"):
        validate(compose_config(normalise_overrides(["agent=voyager",
                                                     "algo.curriculum.enable=true"])))
    cfg = compose_config(normalise_overrides(["agent=voyager"]))
    validate(cfg)
    cache: dict = {}
    a, b = agent_for(cfg, False, cache), agent_for(cfg, True, cache)
    assert a is b and not b.training and isinstance(a, Voyager)
    assert agent_for(cfg, True) is not a                     # no cache: a fresh one
    assert build_agent(cfg.agent).max_retries == 2


@pytest.mark.parametrize("embedding", [None, "policy"])
def test_library_rows_survive_a_checkpoint_exactly(tmp_path, embedding):
    """Rows, search results and (embedding=policy: the tiny model's) vectors are equal
    after a save and a load; vectors of another embedding refuse to load."""
    cfg = compose_config(normalise_overrides([]))
    make = (lambda: Embedder.from_spec(embedding, cfg.model)) if embedding else (lambda: None)
    env, lib = email_skills(U.make_db(tmp_path), make())
    lib.record_eval("sampled", {"t1": True, "t2": False})
    lib.set_meta("last_eval_sampled", {"heldout_solved": 0.5, "forgotten": 0})
    lib.save(tmp_path / "ckpt", 3)
    again = SkillLibrary(make())
    again.load(tmp_path / "ckpt", 3)
    assert again.rows() == lib.rows() and len(again) == 2
    assert len(lib.rows()["vectors"]) == (2 if embedding else 0)
    q = "Which person is leading the Falcon project?"
    assert [(s, r) for s, r in again.search(q, 2)] == lib.search(q, 2)
    if embedding:
        with pytest.raises(ValueError, match="vectors of embedding 'policy:tiny'"):
            SkillLibrary().load(tmp_path / "ckpt", 3)
    assert again.record_eval("sampled", {"t1": False}) == {"t1": True}   # forgotten
    with pytest.raises(FileNotFoundError, match="step-4 checkpoint"):
        again.load(tmp_path / "ckpt", 4)


# --- a cell, killed in its second step and resumed ---------------------------------------------
VOYAGER_CELL = ["agent=voyager", "trainer.tasks_per_step=4", "eval.greedy=false",
                "run.wandb_mode=disabled",
                "env.max_turns=4", "harness.max_tokens_per_episode=300"]


@pytest.mark.heavy     # three short cells in process: ~35 s per case on 2 quiet cores, ~5 min busy
@pytest.mark.parametrize("embedding", ["null", "policy"])
def test_killed_cell_resumes_with_the_uninterrupted_library(tmp_path, monkeypatch, embedding):
    """A cell killed after step 2's rollout and update (its library already grown by
    step 2, the checkpoint not yet written) resumes from step 1's checkpoint: its library
    at the end equals the uninterrupted run's row for row (with embedding=policy: its
    vectors too), as do its metric rows."""
    import ablate.loop.cell as cell_mod
    from test_hardening_resume import TINY
    monkeypatch.setenv("ABLATE_CACHE", str(tmp_path / "cache"))
    cfg = compose_config(normalise_overrides([*TINY, *VOYAGER_CELL,
                                              f"agent.voyager.embedding={embedding}"]))
    cell_mod.run_cell(cfg, tmp_path / "ref")
    real = cell_mod.train_step

    def killed(s):
        row = real(s)
        if s.step == 2:
            raise KeyboardInterrupt("killed")
        return row
    monkeypatch.setattr(cell_mod, "train_step", killed)
    with pytest.raises(KeyboardInterrupt):
        cell_mod.run_cell(cfg, tmp_path / "cell")
    monkeypatch.setattr(cell_mod, "train_step", real)
    cell_mod.run_cell(cfg, tmp_path / "cell")
    lib = (lambda d, s: json.loads((tmp_path / d / "ckpt" / f"step_{s:08d}" / "voyager" /
                                    f"step_{s:08d}.json").read_text()))
    assert lib("cell", 2) == lib("ref", 2) and lib("cell", 1) == lib("ref", 1)
    assert lib("ref", 2)["skills"], "the tiny model verified no skill: nothing compared"
    assert len(lib("ref", 2)["vectors"]) == (len(lib("ref", 2)["solved"])
                                             if embedding == "policy" else 0)
    rows = (lambda d: [{k: v for k, v in json.loads(x).items() if k.startswith("voyager/")
                        or k in ("step", "accuracy", "curriculum/level")}
                       for x in (tmp_path / d / "metrics.jsonl").read_text().splitlines()])
    assert rows("cell") == rows("ref") and len(rows("ref")) == 2


def test_curriculum_proposes_unsolved_tasks_near_the_solved_ones_first(tmp_path):
    """LibraryExperience (ablate.algos.curriculum's Experience, promotion curriculum):
    within the level, unsolved tasks matching a stored skill come first (best BM25),
    then the other unsolved ones, then the solved ones; harder tasks wait for the level."""
    import dataclasses
    import numpy as np
    from ablate.protocol.task import Task
    env, lib = email_skills(U.make_db(tmp_path))
    agent = Voyager()
    agent.library = lib                                   # t1 and t2 are solved
    raw = U.TASKS[0]
    near = dataclasses.replace(raw, id="t3", question="What is the Q3 budget of Denver?")
    far = dataclasses.replace(raw, id="t4", question="Where is the parking?")
    hard = dataclasses.replace(raw, id="t5", question="Q3 budget of Houston, two hops?",
                               hops=2)
    tasks = [Task(t.id, t.question, t.answer, {"hops": t.hops, "difficulty": t.hops}, t)
             for t in (U.TASKS[1], far, hard, near, U.TASKS[0])]
    exp = agent.experience(env)
    got = exp.sample(tasks, 4, 1, np.random.default_rng(0))
    assert [t.id for t in got][:2] == ["t3", "t4"] and {t.id for t in got[2:]} == {"t1", "t2"}
    assert agent.step == 1 and exp.last["pool"] == 4      # level 1: t5 (2 hops) waits
    row = {"accuracy": 1.0}
    for step in (1, 2):
        exp.after_rollout(step, [], [], [], row)
    assert row["curriculum/level"] == 1.0 and agent.curriculum.level(3) == 2
    assert "voyager/library_size" in row
