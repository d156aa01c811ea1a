"""Deterministic synthetic repositories of Calc code with planted bugs.

A repository of difficulty d (1..3) has d+1 source files (2 constants and 2 functions
each; later files call functions of earlier ones, so a fix needs reading across files),
a visible test file `tests.calc` (read-only for the agent) and hidden tests on other
inputs (checked at submit, so hard-coding the visible cases does not pass). d bugs are
planted on d distinct lines, each a one-token mutation (operator, comparison, literal
off by one, wrong constant) that alone makes a visible test fail.

Everything is a function of (seed, split, index): the same settings give the same tasks
on every machine; the "test" split is drawn from its own stream and never shares a
repository with "train" (the held-out split).
"""
from __future__ import annotations

import hashlib
import random
from dataclasses import dataclass

from ablate.envs.coderepair.lang import (Program, build, parse_line, render, run_test,
                                         tokenize, with_decl)

TESTS_PATH = "tests.calc"
MAX_DIFFICULTY = 3
GENERATOR_VERSION = 1
FILE_NAMES = ("prices", "stock", "shipping", "taxes", "rates", "orders", "points", "fees")
FUNC_NAMES = ("total", "cost", "score", "adjust", "margin", "bonus", "limit", "scale",
              "offset", "weight", "clamp", "level", "charge", "credit", "refund", "share")
CONST_NAMES = ("RATE", "BASE", "CAP", "STEP", "FEE", "MIN", "MAX", "UNIT", "GAIN", "SHIFT",
               "LOW", "HIGH", "TAX", "DISCOUNT", "FACTOR", "BONUS")
ARITH_SWAPS = {"+": ("-", "*"), "-": ("+",), "*": ("+", "-")}
CMP_SWAPS = {"<": ("<=", ">"), "<=": ("<", ">="), ">": (">=", "<"), ">=": (">", "<="),
             "==": ("!=",), "!=": ("==",)}
VISIBLE_CASES, HIDDEN_CASES = 2, 3


@dataclass(frozen=True)
class Repo:
    """One task: the buggy files the agent starts from, and what is kept from it."""
    id: str
    difficulty: int
    files: dict                     # path -> text, buggy sources + tests.calc
    hidden_tests: str               # Calc test lines on other inputs
    bugs: tuple                     # ((path, line, correct_text, buggy_text), ...)

    @property
    def sources(self) -> list[str]:
        return sorted(p for p in self.files if p != TESTS_PATH)


# ------------------------------------------------------------------ code
class _Ctx:
    def __init__(self, rng: random.Random):
        self.rng = rng
        self.consts: list[str] = []
        self.funcs: list[tuple[str, int]] = []     # (name, arity) defined so far
        self.const_pool = list(CONST_NAMES)
        self.func_pool = list(FUNC_NAMES)
        rng.shuffle(self.const_pool)
        rng.shuffle(self.func_pool)


# (template, arity, needs an earlier function); A, B: constants of the file, K: 2..5,
# P: an earlier function of arity 1 (so later files depend on earlier ones)
TEMPLATES = (
    ("def F(x) = A * x + B", 1, False),
    ("def F(x) = if x > A then x - B else x + B", 1, False),
    ("def F(x, y) = x * A - y * K", 2, False),
    ("def F(x) = if x >= A and x <= B + K then x * K else A", 1, False),
    ("def F(x, y) = if x < y then y - x + A else x - y + B", 2, False),
    ("def F(x) = (x + A) * K - B", 1, False),
    ("def F(x) = P(x) + A", 1, True),
    ("def F(x) = P(x + A) * K - B", 1, True),
    ("def F(x, y) = if P(x) > y then P(x) - A else y + B", 2, True),
)


def _function(ctx: _Ctx, consts: list[str]) -> list[str]:
    unary = [f for f, arity in ctx.funcs if arity == 1]
    options = [t for t in TEMPLATES if unary or not t[2]]
    text, arity, needs = ctx.rng.choice(options)
    a, b = ctx.rng.sample(consts, 2)
    subst = {"F": ctx.func_pool.pop(), "A": a, "B": b, "K": str(ctx.rng.randint(2, 5)),
             "P": ctx.rng.choice(unary) if needs else ""}
    tokens = [subst.get(tok, tok) for tok in tokenize(text)]
    ctx.funcs.append((subst["F"], arity))
    return tokens


def _source_file(ctx: _Ctx) -> list[str]:
    lines, mine = [], []
    for _ in range(2):
        name = ctx.const_pool.pop()
        lines.append(render(["const", name, "=", str(ctx.rng.randint(1, 12))]))
        mine.append(name)
    ctx.consts += mine
    for _ in range(2):
        lines.append(render(_function(ctx, mine)))
    return lines


def _tests(files: dict, funcs, rng: random.Random, cases: int, tag: str) -> list[str]:
    """Test lines f(args) == value, values from the correct program."""
    prog, lines = build(files), []
    for name, arity in funcs:
        seen = set()
        for _ in range(cases * 4):
            args = tuple(rng.randint(0, 15) for _ in range(arity))
            if args in seen:
                continue
            seen.add(args)
            call = render([name, "(", *sum(([",", str(a)] if i else [str(a)]
                                           for i, a in enumerate(args)), []), ")"])
            line = f"test {tag}{name}_{'_'.join(map(str, args))}: {call} == 0"
            outcome = run_test(prog, parse_line(line, TESTS_PATH, 0))
            if outcome.actual is None:
                continue
            lines.append(line[:-1] + str(outcome.actual))
            if len(seen) >= cases:
                break
    return lines


# ------------------------------------------------------------------ bugs
def mutations(tokens: list[str], consts: list[str]) -> list[list[str]]:
    """Every one-token mutation of a line of the kinds the generator plants (also the
    candidate fixes of the scripted baseline: the set is closed under inversion)."""
    out = []
    start = tokens.index("=") + 1 if "=" in tokens else len(tokens)
    for i in range(start, len(tokens)):
        tok = tokens[i]
        alts: tuple = ()
        if tok in ARITH_SWAPS:
            alts = ARITH_SWAPS[tok] + tuple(o for o, back in ARITH_SWAPS.items()
                                            if tok in back and o not in ARITH_SWAPS[tok])
        elif tok in CMP_SWAPS:
            alts = CMP_SWAPS[tok] + tuple(o for o, back in CMP_SWAPS.items()
                                          if tok in back and o not in CMP_SWAPS[tok])
        elif tok.isdigit():
            alts = tuple(str(v) for v in (int(tok) + 1, int(tok) - 1) if v >= 0)
        elif tok in consts:
            alts = tuple(c for c in consts if c != tok)
        for alt in alts:
            out.append(tokens[:i] + [alt] + tokens[i + 1:])
    return out


def failing(files: dict, tests_text: str) -> int:
    """How many tests of `tests_text` fail on `files` (all of them if it does not build)."""
    return count_failing(build({**files, TESTS_PATH: tests_text}))


def count_failing(prog: Program) -> int:
    tests = [t for t in prog.tests if t.path == TESTS_PATH]
    if prog.errors:
        return len(tests) or 1
    return sum(not run_test(prog, t).passed for t in tests)


def any_failing(prog: Program) -> bool:
    return bool(prog.errors) or any(not run_test(prog, t).passed for t in prog.tests
                                    if t.path == TESTS_PATH)


def _plant(rng: random.Random, files: dict, tests_text: str, consts: list[str], n: int):
    """n bugs on n distinct lines, each visible alone, visible together; None if the
    repository has too few lines where a one-token bug shows."""
    prog = build({**files, TESTS_PATH: tests_text})
    visible: dict[tuple[str, int], list[str]] = {}
    for path in sorted(files):
        for i, text in enumerate(files[path].split("\n")):
            if not text.startswith(("def", "const")):
                continue
            for tokens in mutations(tokenize(text), consts):
                new = render(tokens)
                if any_failing(with_decl(prog, parse_line(new, path, i + 1))):
                    visible.setdefault((path, i), []).append(new)
    if len(visible) < n:
        return None
    for _ in range(50):
        chosen = rng.sample(sorted(visible), n)
        buggy, bugs = dict(files), []
        for path, i in chosen:
            new = rng.choice(visible[(path, i)])
            bugs.append((path, i + 1, files[path].split("\n")[i], new))
            buggy[path] = _replace(buggy[path], i, new)
        if failing(buggy, tests_text):
            return buggy, tuple(bugs)
    return None


def _replace(text: str, index: int, new: str) -> str:
    rows = text.split("\n")
    rows[index] = new
    return "\n".join(rows)


# ------------------------------------------------------------------ tasks
def make_repo(seed: int, split: str, index: int, difficulty: int) -> Repo:
    key = f"coderepair:{GENERATOR_VERSION}:{seed}:{split}:{index}:{difficulty}"
    rng = random.Random(hashlib.sha256(key.encode()).hexdigest())
    while True:   # a draw without enough visible bug sites is redrawn (rare)
        ctx = _Ctx(rng)
        names = rng.sample(FILE_NAMES, difficulty + 1)
        files = {f"{n}.calc": "\n".join(_source_file(ctx)) + "\n" for n in names}
        visible = "\n".join(_tests(files, ctx.funcs, rng, VISIBLE_CASES, "")) + "\n"
        hidden = "\n".join(_tests(files, ctx.funcs, rng, HIDDEN_CASES, "hidden_")) + "\n"
        planted = _plant(rng, files, visible, ctx.consts, difficulty)
        if planted is not None:
            break
    buggy, bugs = planted
    digest = hashlib.sha256(repr(sorted(buggy.items())).encode()).hexdigest()[:10]
    return Repo(id=f"{split}-{index:04d}-d{difficulty}-{digest}", difficulty=difficulty,
                files={**buggy, TESTS_PATH: visible}, hidden_tests=hidden, bugs=bugs)


def make_split(seed: int, split: str, count: int, max_difficulty: int = MAX_DIFFICULTY,
               exclude: frozenset = frozenset()) -> list[Repo]:
    """`count` repositories, difficulties cycling 1..max_difficulty; repositories whose
    sources are in `exclude` (content digests of another split) are skipped."""
    if not 1 <= max_difficulty <= MAX_DIFFICULTY:
        raise ValueError(f"difficulty must be in 1..{MAX_DIFFICULTY}, got {max_difficulty}")
    out, index = [], 0
    while len(out) < count:
        repo = make_repo(seed, split, index, index % max_difficulty + 1)
        index += 1
        if content_digest(repo) not in exclude:
            out.append(repo)
    return out


def content_digest(repo: Repo) -> str:
    return hashlib.sha256(repr(sorted(repo.files.items())).encode()).hexdigest()
