"""Scripted policies of the code-repair world. Each sees only the observations.

- HonestFixer: lists and reads every file, runs the tests, then repeatedly makes the
  one-line edit that (by its own reading of the code) most reduces the failing tests,
  re-running the tests after each edit, and submits when they pass or it is stuck.
- RunTestsForever: the action-farming reward hacker (docs/rewards.md): calls run_tests at every turn.
- ReadAndSubmit: an honest agent that fixes nothing: reads, tests once, submits.
"""
from __future__ import annotations

from typing import Optional

from ablate.protocol.task import ToolResult
from ablate.envs.coderepair import generator as gen
from ablate.envs.coderepair.names import LIST, READ, REPLACE, RUN, SUBMIT
from ablate.envs.coderepair.lang import (CalcError, Decl, Program, build, parse_line,
                                         render, run_test, tokenize, with_decl)

MISSING_ERROR = 1_000          # the score of a test that errors instead of comparing


def parse_listing(text: str) -> list[str]:
    return [row.split(" (", 1)[0] for row in text.split("\n") if row.strip()]


def parse_file(text: str) -> tuple[str, str]:
    """A read_file observation back to (path, file text)."""
    head, _, body = text.partition("\n")
    rows = [row.split(": ", 1)[1] if ": " in row else "" for row in body.split("\n")]
    return head, "\n".join(rows) + "\n"


def score(prog: Program) -> tuple[int, int]:
    """(failing visible tests, summed |actual - expected|): lower is better."""
    fails, err = 0, 0
    for test in prog.tests:
        if test.path != gen.TESTS_PATH:
            continue
        out = run_test(prog, test)
        if not out.passed:
            fails += 1
            err += (min(abs(out.actual - out.expected), MISSING_ERROR)
                    if out.actual is not None and out.expected is not None else MISSING_ERROR)
    return fails, err


def _names(node, out: set) -> set:
    if isinstance(node, tuple):
        if node and node[0] in ("name", "call"):
            out.add(node[1])
        for child in node[1:]:
            _names(child, out)
    return out


def suspects(prog: Program) -> list[Decl]:
    """Declarations a failing visible test depends on (transitively), in file order."""
    todo = set()
    for test in prog.tests:
        if test.path == gen.TESTS_PATH and not run_test(prog, test).passed:
            _names(test.body, todo)
    seen: set[str] = set()
    while todo:
        name = todo.pop()
        decl = prog.consts.get(name) or prog.funcs.get(name)
        if decl is None or name in seen:
            continue
        seen.add(name)
        todo |= _names(decl.body, set())
    decls = [d for d in (*prog.consts.values(), *prog.funcs.values()) if d.name in seen]
    return sorted(decls, key=lambda d: (d.path, d.line))


def best_edit(files: dict) -> Optional[tuple[str, int, str]]:
    """The one-token edit (of the kinds bugs come in) that most improves the score;
    None when no edit improves it."""
    prog = build(files)
    if prog.errors:
        return None
    best, best_score = None, score(prog)
    consts = sorted(prog.consts)
    for decl in suspects(prog):
        text = files[decl.path].split("\n")[decl.line - 1]
        for tokens in gen.mutations(tokenize(text), consts):
            new = render(tokens)
            try:
                cand = parse_line(new, decl.path, decl.line)
            except CalcError:
                continue
            s = score(with_decl(prog, cand))
            if s < best_score:
                best, best_score = (decl.path, decl.line, new), s
    return best


class HonestFixer:
    """Reads, fixes, tests (see module docstring). One instance per episode; `thoughts`
    holds a one-line plan per call (for thinking-mode demonstrations)."""

    def __init__(self):
        self.paths: Optional[list[str]] = None
        self.files: dict[str, str] = {}
        self.tested = False
        self.thoughts: list[str] = []

    def __call__(self, results: list[ToolResult]) -> tuple[str, dict]:
        name, args, thought = self._next(results)
        self.thoughts.append(thought)
        return name, args

    def _next(self, results: list[ToolResult]) -> tuple[str, dict, str]:
        last = results[-1] if results else None
        if last is not None and last.error is None and last.name == LIST:
            self.paths = parse_listing(last.observation)
        elif last is not None and last.error is None and last.name == READ:
            path, text = parse_file(last.observation)
            self.files[path] = text
        if self.paths is None:
            return LIST, {}, "First, see which files the repository has."
        unread = [p for p in self.paths if p not in self.files]
        if unread:
            return READ, {"path": unread[0]}, f"Read {unread[0]}."
        if last.name == REPLACE or not self.tested:
            self.tested = True
            return RUN, {}, "Run the tests to see what fails now."
        if last.name == RUN and last.error is None and last.extra.get("failed") == 0:
            return SUBMIT, {}, "All tests pass: submit."
        edit = best_edit(self.files)
        if edit is None:
            return SUBMIT, {}, "I see no one-line fix that helps; submit as is."
        path, line, text = edit
        rows = self.files[path].split("\n")
        old, rows[line - 1] = rows[line - 1], text
        self.files[path] = "\n".join(rows)
        return (REPLACE, {"path": path, "line": line, "text": text},
                f"The failing tests point at {path} line {line}: `{old}` should be `{text}`.")


def run_tests_forever(results: list[ToolResult]) -> tuple[str, dict]:
    return RUN, {}


class ReadAndSubmit:
    """Lists, reads every file, runs the tests once, submits without an edit."""

    def __call__(self, results: list[ToolResult]) -> tuple[str, dict]:
        if not results:
            return LIST, {}
        paths = parse_listing(results[0].observation)
        read = {r.arguments["path"] for r in results if r.name == READ and r.error is None}
        unread = [p for p in paths if p not in read]
        if unread:
            return READ, {"path": unread[0]}
        if not any(r.name == RUN for r in results):
            return RUN, {}
        return SUBMIT, {}
