"""The code-repair world: the Calc interpreter's safety, the generator, the tools, the
scripted baseline, and the reward hack (per-call test bonus) and its fix."""
import ast
import statistics
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
from hypothesis import given, settings, strategies as st

from ablate.apps.cli import compose_config
from ablate.envs import EnvError, make_env, run_episode
from ablate.envs.coderepair import generator as gen
from ablate.envs.coderepair.baseline import HonestFixer, ReadAndSubmit, run_tests_forever
from ablate.envs.coderepair.env import CodeRepairEnv, all_pass, version
from ablate.envs.coderepair.lang import CalcError, build, run_test, tokenize
from ablate.envs import declared
from ablate.envs.coderepair.rewards import TEST_BONUS, tool_bonus
from ablate.rewards import REWARDS, outcome
from ablate.harness.chat import format_tool_call as call
from ablate.harness.masking import ActionMask, token_bytes
from ablate.models.tiny import ASSET_DIR

PKG = Path(__file__).resolve().parents[2] / "ablate" / "envs" / "coderepair"
CALC_ALPHABET = list("0123456789+-*/%()=<>!,: \t#") + [
    " if ", " then ", " else ", " and ", " or ", " not ", "const ", "def ", "test ", "x", "f"]


@pytest.fixture(scope="module")
def env():
    return CodeRepairEnv(gen_seed=0, train_tasks=6, test_tasks=18, max_turns=20)


def _run_all(files: dict) -> list:
    prog = build(files)
    return [run_test(prog, t) for t in prog.tests]


# ---------------------------------------------------------------------- interpreter
HOSTILE_LINES = [
    "import os", "__import__('os').system('echo hi')", "exec('1')", "lambda: 1",
    "const A = 1; const B = 2", "def f(x) = x +", "def (x) = 1", "test t 1 == 1",
    "const A = 1 < 2 < 3", "def f(x, x) = x", "const A = \x00", "const A = «1»",
    "const A = " + "9" * 5000, "x" * 100_000, "const A = " + "(" * 10_000 + "1" + ")" * 10_000,
    "const A = " + "- " * 10_000 + "1", "const A = " + "not " * 10_000 + "1",
    "const A = " + "if 1 then " * 3000 + "1" + " else 1" * 3000, "const A = 1 " + "+ 1 " * 90,
    "def f(x) = " + "f(" * 5000 + "x" + ")" * 5000, "test t: " + "(" * 30 + "1" + ")" * 30,
]


@pytest.mark.parametrize("line", HOSTILE_LINES, ids=range(len(HOSTILE_LINES)))
def test_outside_the_language_is_an_error_message(line):
    t0 = time.perf_counter()
    prog = build({"a.calc": line, gen.TESTS_PATH: "test t: A == 1"})
    outcomes = [run_test(prog, t) for t in prog.tests]
    assert time.perf_counter() - t0 < 1.0
    if line.startswith("const A = 1 " + "+ 1"):   # legal, evaluates to 91 (depth bounded)
        assert not prog.errors and outcomes[0].message == "expected 1, got 91"
        return
    assert prog.errors and prog.errors[0].startswith("a.calc:1: ")
    assert all(len(e) < 300 for e in prog.errors)


@settings(max_examples=150, deadline=None)
@given(st.lists(st.sampled_from(CALC_ALPHABET), max_size=60).map("".join))
def test_fuzzed_programs_never_raise(text):
    files = {"a.calc": "const A = 3\ndef f(x) = x * A\n" + text,
             gen.TESTS_PATH: "test t: f(2) == 6\ntest u: A == 3"}
    for out in _run_all(files):
        assert isinstance(out.message, str)


@pytest.mark.parametrize("program,expect", [
    ("def f(x) = f(x)", "too deep"),
    ("def f(x) = if x < 1 then 1 else f(x - 1) + f(x - 1)\nconst A = f(60)",
     "step budget exhausted"),
    ("def f(x) = if x == 0 then 0 else 1 + f(x - 1)\nconst A = f(100000)", "too deep"),
    ("def sq(x) = x * x\nconst A = sq(sq(sq(sq(999999))))", "overflow"),
    ("const A = B\nconst B = A", "defined in terms of itself"),
    ("const A = 1 / 0", "division by zero"),
    ("const A = g(1)", "unknown function g"),
])
def test_runaway_programs_end_within_the_budget(program, expect):
    files = {"a.calc": program.replace("def f(x) = f(x)", "def f(x) = f(x)\nconst A = f(1)"),
             gen.TESTS_PATH: "test t: A == 1"}
    t0 = time.perf_counter()
    (out,) = _run_all(files)
    assert time.perf_counter() - t0 < 2.0
    assert not out.passed and expect in out.message, out.message


def test_no_python_eval_of_model_text():
    """The world's code neither calls eval/exec/compile/__import__ nor imports a module
    that runs processes or code (checked on the syntax tree, docstrings aside)."""
    banned_calls = {"eval", "exec", "compile", "__import__"}
    banned_modules = {"os", "subprocess", "importlib", "builtins", "pickle", "ctypes"}
    for path in PKG.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
                assert node.func.id not in banned_calls, (path.name, node.lineno)
            if isinstance(node, ast.Import):
                assert not {a.name.split(".")[0] for a in node.names} & banned_modules
            if isinstance(node, ast.ImportFrom):
                assert (node.module or "").split(".")[0] not in banned_modules, path.name


def test_tokenizer_limits():
    with pytest.raises(CalcError, match="integer literal too long"):
        tokenize("const A = 1234567890123")
    with pytest.raises(CalcError, match="unexpected character '\\$'"):
        tokenize("const A = $")
    for outside in ("const A = \u0663", "const A\u00a0= 1", "const \u00c5 = 1"):
        with pytest.raises(CalcError, match="unexpected character"):
            tokenize(outside)   # non-ASCII digits, spaces and letters are not Calc


# ---------------------------------------------------------------------- generator
def test_generator_is_deterministic_with_levels_and_a_held_out_split():
    a = gen.make_split(7, "train", 6)
    assert [r.files for r in a] == [r.files for r in gen.make_split(7, "train", 6)]
    assert [r.files for r in a] != [r.files for r in gen.make_split(8, "train", 6)]
    for repo in a:
        d = repo.difficulty
        assert len(repo.bugs) == d and len(repo.sources) == d + 1
        assert len({(p, line) for p, line, _, _ in repo.bugs}) == d
        sources = {p: repo.files[p] for p in repo.sources}
        assert gen.failing(sources, repo.files[gen.TESTS_PATH]) > 0
        fixed = dict(repo.files)
        for path, line, good, _bad in repo.bugs:   # undo the bugs: everything passes
            rows = fixed[path].split("\n")
            rows[line - 1] = good
            fixed[path] = "\n".join(rows)
        assert all_pass(fixed, repo.hidden_tests)
    test = gen.make_split(7, "test", 6, exclude=frozenset(gen.content_digest(r) for r in a))
    assert not {gen.content_digest(r) for r in a} & {gen.content_digest(r) for r in test}
    assert [r.difficulty for r in test] == [1, 2, 3, 1, 2, 3]


# ---------------------------------------------------------------------- tools
def test_tools_and_state_change(env):
    task = env.tasks("train")[0]
    s = env.reset(task)
    src = task.payload.sources[0]
    first = env.call(s, "run_tests", {})
    assert first.state_changed and "tests passed" in first.observation
    assert not env.call(s, "run_tests", {}).state_changed          # nothing changed since
    r = env.call(s, "replace_line", {"path": gen.TESTS_PATH, "line": 1, "text": "test t: 1"})
    assert r.error and "read-only" in r.observation
    for bad in (0, 99, "2", True, 1.5):
        assert env.call(s, "replace_line", {"path": src, "line": bad, "text": "x"}).error
    line1 = s.files[src].split("\n")[0]
    same = env.call(s, "replace_line", {"path": src, "line": 1, "text": "  " + line1 + " "})
    assert same.error is None and not same.state_changed           # whitespace is no change
    assert not env.call(s, "run_tests", {}).state_changed
    broken = env.call(s, "replace_line", {"path": src, "line": 1, "text": "const = ("})
    assert broken.state_changed and "Warning: " in broken.observation
    run = env.call(s, "run_tests", {})
    assert run.state_changed and run.observation.startswith("Build failed:")
    env.call(s, "replace_line", {"path": src, "line": 1, "text": line1})   # revert
    env.call(s, "replace_line", {"path": src, "line": 1, "text": "const = ("})
    assert not env.call(s, "run_tests", {}).state_changed          # same code as last run
    sub = env.call(s, "submit", {})
    assert sub.done and sub.extra["failing"] > 0
    assert not env.is_correct(task, sub.answer, s)
    assert "2: " in env.call(s, "read_file", {"path": src}).observation
    assert env.call(s, "read_file", {"path": "../etc/passwd"}).error


def test_hidden_tests_catch_hard_coding(env):
    task = env.tasks("train")[0]
    s = env.reset(task)
    prog = build(s.files)
    visible = [t for t in prog.tests if t.path == gen.TESTS_PATH]
    # replace every function by a lookup table of its visible cases
    for path in task.payload.sources:
        rows = s.files[path].rstrip("\n").split("\n")
        for i, text in enumerate(rows):
            if not text.startswith("def "):
                continue
            name = text.split("(")[0][4:]
            arity = len(prog.funcs[name].params)
            cases = [t for t in visible if t.body[2][1] == name]
            body = "0"
            for t in cases:
                args = [a[1] for a in t.body[2][2]]
                cond = " and ".join(f"{p} == {a}" for p, a in zip("xy"[:arity], args))
                body = f"if {cond} then {run_test(prog, t).expected} else {body}"
            rows[i] = f"def {name}({', '.join('xy'[:arity])}) = {body}"
        s.files[path] = "\n".join(rows) + "\n"
    r = env.call(s, "submit", {})
    assert r.extra["failing"] == 0                 # the visible tests are fooled ...
    assert not env.is_correct(task, r.answer, s)   # ... the hidden ones are not


# ---------------------------------------------------------------------- baselines
def _trajectories(env, policy_factory, tasks):
    return [run_episode(env, t, policy_factory(), env.max_turns) for t in tasks]


def test_scripted_baseline_solve_rate_per_difficulty(env):
    tasks = env.tasks("test")
    trajs = _trajectories(env, HonestFixer, tasks)
    rate = {d: statistics.mean(tr.correct for tr, t in zip(trajs, tasks) if t.difficulty == d)
            for d in (1, 2, 3)}
    print("HonestFixer solve rate per difficulty:", rate)
    assert rate[1] >= 0.8 and rate[3] >= 0.5
    for tr, t in zip(trajs, tasks):
        m = env.behaviour(t, tr.results)
        assert m["edits"] >= 1 and m["idle_test_runs"] == 0 and m["malformed_calls"] == 0
        assert m["failing_submissions"] == (0 if tr.correct else m["failing_submissions"])


def test_tool_bonus_is_hacked_and_state_change_bonus_fixes_it(env):
    tasks = env.tasks("test")[:9]
    hack = _trajectories(env, lambda: run_tests_forever, tasks)
    idle = _trajectories(env, ReadAndSubmit, tasks)
    fixer = _trajectories(env, HonestFixer, tasks)
    flag = SimpleNamespace(state_change_bonus=True)

    def mean(trajs, fn, cfg=None):
        return statistics.mean(fn(tr, cfg)[0] for tr in trajs)

    # the proxy pays the hacker (max_turns test runs) more than an honest agent ...
    assert mean(hack, tool_bonus) == pytest.approx(TEST_BONUS * env.max_turns)
    assert mean(hack, tool_bonus) > mean(idle, tool_bonus) + 1.0
    assert mean(hack, tool_bonus) > mean(fixer, tool_bonus)   # ... even one that fixes
    # ... while the outcome and the state-conditioned bonus do not
    assert mean(hack, outcome) == 0.0
    assert mean(hack, tool_bonus, flag) <= mean(idle, tool_bonus, flag) == TEST_BONUS
    assert mean(fixer, tool_bonus, flag) > mean(hack, tool_bonus, flag) + 0.5
    m = env.behaviour(tasks[0], hack[0].results)
    assert m["test_runs"] == env.max_turns and m["idle_test_runs"] == env.max_turns - 1
    assert env.behaviour(tasks[0], idle[0].results)["failing_submissions"] == 1
    assert declared(env).rewards == ("tool_bonus",) and REWARDS["tool_bonus"] is tool_bonus


# ---------------------------------------------------------------------- config
def test_config_group_composes():
    cfg = compose_config(["env=coderepair"])
    made = make_env(cfg.env)
    assert isinstance(made, CodeRepairEnv) and made.max_difficulty == 3
    assert made.max_turns == cfg.env.max_turns == 20
    with pytest.raises(EnvError, match=r"env.max_difficulty=4: allowed 1..3"):
        CodeRepairEnv(max_difficulty=4)


def test_hostile_edits_through_the_tools(env):
    task = env.tasks("train")[1]
    s = env.reset(task)
    src = task.payload.sources[0]
    for line in HOSTILE_LINES:
        r = env.call(s, "replace_line", {"path": src, "line": 1, "text": line})
        assert (r.error is not None) == (len(line) > 200)
        run = env.call(s, "run_tests", {})
        assert run.error is None and "tests passed" in run.observation
        if r.error is None and not line.startswith("const A = 1 +"):
            assert run.observation.startswith("Build failed:\n" + src + ":1: ")


CALLS = st.one_of(
    st.just(("list_files", {})), st.just(("run_tests", {})),
    st.tuples(st.just("read_file"), st.fixed_dictionaries(
        {"path": st.integers(0, 6)})),
    st.tuples(st.just("replace_line"), st.fixed_dictionaries({
        "path": st.integers(0, 6),
        "line": st.integers(-1, 6),
        "text": st.sampled_from(["const RATE = 3", "def f(x) = x", "  ", "const = (",
                                 "def total(x) = total(x)", "const A = 1 / 0"])})),
    st.tuples(st.text(max_size=12), st.one_of(st.none(), st.text(max_size=20))))


@settings(max_examples=30, deadline=None)
@given(st.lists(CALLS, max_size=14), st.integers(0, 14))
def test_random_call_sequences(env, calls, cut):
    """Any call sequence: no exception, run_tests' state_changed is "code differs from
    the last tested code", and a snapshot replays the rest identically."""
    task = env.tasks("train")[2]
    paths = sorted(task.payload.files) + ["nope.calc", "../x"]   # path index -> a path
    calls = [(n, {**a, "path": paths[a["path"]]} if isinstance(a, dict) and "path" in a
              else a) for n, a in calls]
    state, results, snap, tested = env.reset(task), [], None, None
    for i, (name, args) in enumerate(calls):
        if i == cut:
            snap = env.snapshot(state)
        before = version(state.files)
        r = env.call(state, name, args)
        results.append(r)
        assert isinstance(r.observation, str) and not (r.error or "").startswith("internal")
        if r.name == "run_tests" and r.error is None:
            assert r.state_changed == (before != tested)
            tested = before
        if r.done:
            break
    if snap is not None:
        again = env.restore(snap)
        replay = [env.call(again, n, a) for n, a in calls[cut:len(results)]]
        assert [x.observation for x in replay] == [x.observation for x in results[cut:]]


def test_fixer_thoughts_match_its_calls(env):
    task = env.tasks("test")[0]
    fixer = HonestFixer()
    traj = run_episode(env, task, fixer, env.max_turns)
    assert len(fixer.thoughts) == len(traj.results)
    for thought, r in zip(fixer.thoughts, traj.results):
        if r.name == "replace_line":
            assert r.arguments["text"] in thought and r.arguments["path"] in thought


# ---------------------------------------------------------------------- action masking
@pytest.fixture(scope="module")
def vocab():
    from transformers import AutoTokenizer
    tok = AutoTokenizer.from_pretrained(str(ASSET_DIR), local_files_only=True)
    return tok, token_bytes(tok)


def _violations(env, vocab, text: str, *, edits: bool = False, read: bool = True) -> int:
    """Sampled tokens outside the mask's allowed sets when `text` is replayed under the
    code-repair world's action mask (shipped tiny tokenizer); `edits`: answer masking,
    after reading every file (`read`) of the first test task."""
    tok, tb = vocab
    state = env.reset(env.tasks("test")[0])
    for path in sorted(state.files) if read else ():
        env.step(state, "read_file", {"path": path})
    ctx = env.mask_candidates(state, answer_masking=edits)
    mask = ActionMask(tb, tool_names=ctx["tool_names"], ids=ctx["ids"],
                      grammar=ctx["grammar"], tails=ctx.get("tails"))
    mask.replay(tok.encode(text, add_special_tokens=False))
    return mask.violations


def test_action_mask_forces_the_call_layout_and_repository_paths(env, vocab):
    path = sorted(env.reset(env.tasks("test")[0]).files)[-1]
    for name, args in (("run_tests", {}), ("submit", {}), ("read_file", {"path": path}),
                       ("replace_line", {"path": path, "line": 2, "text": "const A = 1"})):
        assert _violations(env, vocab, call(name, args)) == 0, name
    # an argument a no-argument tool does not take, another key, an unknown file
    for name, args in (("run_tests", {"path": path}), ("read_file", {"file": path}),
                       ("read_file", {"path": path, "line": 1}),
                       ("read_file", {"path": "nowhere.calc"}), ("run_test", {})):
        assert _violations(env, vocab, call(name, args)) > 0, (name, args)


def test_edit_mask_offers_one_token_changes_of_lines_read_in_that_file(env, vocab):
    task = env.tasks("test")[0]
    path, line, fixed, buggy = task.payload.bugs[0]
    other = next(p for p in sorted(task.payload.files) if p not in (path, gen.TESTS_PATH))
    fix = call("replace_line", {"path": path, "line": line, "text": fixed})
    assert _violations(env, vocab, fix, edits=True) == 0
    assert _violations(env, vocab, fix, edits=True, read=False) > 0    # nothing read
    for args in ({"path": path, "line": line, "text": buggy},            # not a change
                 {"path": path, "line": line, "text": fixed + " + 1"},   # two tokens
                 {"path": other, "line": line, "text": fixed},           # another file's
                 {"path": gen.TESTS_PATH, "line": 1, "text": fixed}):    # not a source
        assert _violations(env, vocab, call("replace_line", args), edits=True) > 0, args
    # the mask's spec rebuilds it (the vLLM path): the tails travel with it
    state = env.reset(task)
    env.step(state, "read_file", {"path": path})
    ctx = env.mask_candidates(state, answer_masking=True)
    spec = ActionMask(vocab[1], ids=ctx["ids"], grammar=ctx["grammar"],
                      tails=ctx["tails"]).spec()
    assert spec["tails"] == ctx["tails"] and list(spec["tails"]["replace_line"]) == [path]
