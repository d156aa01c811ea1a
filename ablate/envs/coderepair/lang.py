"""Calc, the tiny language of the code-repair world, and its safe interpreter.

Model-written text is only ever tokenized, parsed and evaluated here: no Python `eval`,
`exec` or subprocess. Every error (bad character, bad syntax, unknown name, division by
zero, overflow, too deep, step budget spent) is a CalcError whose message the agent reads.

One declaration per line (blank lines and `# comments` allowed):

    const RATE = 3
    def price(n) = if n > 10 then RATE * n - 5 else RATE * n
    test price_12: price(12) == 31

Expressions: integers, names, calls f(a, b), + - * / (floor) %, unary -, comparisons
== != < <= > >= (1 or 0, non-associative), and / or / not, `if c then a else b`,
parentheses. All files of a repository share one namespace; functions may recurse (the
only loops), which the step budget and the depth limit end.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Optional

MAX_LINE_CHARS = 400       # longer lines are refused before tokenizing
MAX_INT_DIGITS = 12        # literals; values are bounded by MAX_VALUE
MAX_VALUE = 10 ** 15       # larger results are an overflow error
MAX_NAME_CHARS = 40
MAX_NEST = 24              # parser: nested parentheses / unary operators / ifs
MAX_DEPTH = 200            # evaluator: nested expression + call frames
STEP_BUDGET = 5_000        # evaluator: AST nodes per test

KEYWORDS = {"const", "def", "test", "if", "then", "else", "and", "or", "not"}
CMP_OPS = ("==", "!=", "<=", ">=", "<", ">")
ARITH_OPS = ("+", "-", "*", "/", "%")
_TOKEN = re.compile(r"\s*(?:(\d+)|([A-Za-z_][A-Za-z0-9_]*)|(==|!=|<=|>=|[-+*/%<>()=,:])|(#.*))",
                    re.ASCII)


class CalcError(Exception):
    """Any failure of Calc text; the message is what the agent sees."""


@dataclass(frozen=True)
class Decl:
    kind: str                  # "const" | "def" | "test"
    name: str
    params: tuple[str, ...]
    body: tuple                # AST
    path: str
    line: int


# ------------------------------------------------------------------ tokenizer
def tokenize(text: str) -> list[str]:
    """The tokens of one line (comments dropped). Raises CalcError."""
    if len(text) > MAX_LINE_CHARS:
        raise CalcError(f"line too long ({len(text)} characters, at most {MAX_LINE_CHARS})")
    out, pos = [], 0
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if m is None or m.end() == pos:
            rest = text[pos:].lstrip()
            if not rest:
                break
            column = len(text) - len(rest) + 1
            raise CalcError(f"unexpected character {rest[0]!r} at column {column}")
        num, name, op, _comment = m.groups()
        if num is not None:
            if len(num) > MAX_INT_DIGITS:
                raise CalcError(f"integer literal too long ({len(num)} digits, at most "
                                f"{MAX_INT_DIGITS})")
            out.append(num)
        elif name is not None:
            if len(name) > MAX_NAME_CHARS:
                raise CalcError(f"name too long ({len(name)} characters)")
            out.append(name)
        elif op is not None:
            out.append(op)
        pos = m.end()
    return out


def render(tokens: list[str]) -> str:
    """Canonical text of a token list (what the generator writes)."""
    parts: list[str] = []
    for i, tok in enumerate(tokens):
        prev = tokens[i - 1] if i else None
        glue = (i == 0 or tok in (")", ",", ":") or prev == "(" or
                (tok == "(" and prev is not None and _is_name(prev)))
        parts.append(tok if glue else " " + tok)
    return "".join(parts)


def _is_name(tok: str) -> bool:
    return (tok[:1].isalpha() or tok[:1] == "_") and tok not in KEYWORDS


# ------------------------------------------------------------------ parser
class _Parser:
    def __init__(self, tokens: list[str]):
        self.toks, self.i, self.nest = tokens, 0, 0

    def peek(self) -> Optional[str]:
        return self.toks[self.i] if self.i < len(self.toks) else None

    def take(self, want: Optional[str] = None) -> str:
        tok = self.peek()
        if tok is None:
            raise CalcError("unexpected end of line" + (f", expected {want!r}" if want else ""))
        if want is not None and tok != want:
            raise CalcError(f"expected {want!r}, found {tok!r}")
        self.i += 1
        return tok

    def name(self) -> str:
        tok = self.take()
        if not _is_name(tok):
            raise CalcError(f"expected a name, found {tok!r}")
        return tok

    def deeper(self):
        self.nest += 1
        if self.nest > MAX_NEST:
            raise CalcError(f"expression nested too deeply (more than {MAX_NEST} levels)")

    def expr(self) -> tuple:
        if self.peek() == "if":
            self.deeper()
            self.take("if")
            cond = self.expr()
            self.take("then")
            a = self.expr()
            self.take("else")
            b = self.expr()
            self.nest -= 1
            return ("if", cond, a, b)
        return self.or_()

    def or_(self) -> tuple:
        node = self.and_()
        while self.peek() == "or":
            self.take()
            node = ("or", node, self.and_())
        return node

    def and_(self) -> tuple:
        node = self.not_()
        while self.peek() == "and":
            self.take()
            node = ("and", node, self.not_())
        return node

    def not_(self) -> tuple:
        if self.peek() == "not":
            self.deeper()
            self.take()
            node = ("not", self.not_())
            self.nest -= 1
            return node
        return self.cmp()

    def cmp(self) -> tuple:
        node = self.add()
        if self.peek() in CMP_OPS:
            op = self.take()
            node = ("bin", op, node, self.add())
            if self.peek() in CMP_OPS:
                raise CalcError("comparisons cannot be chained; use `and`")
        return node

    def add(self) -> tuple:
        node = self.mul()
        while self.peek() in ("+", "-"):
            op = self.take()
            node = ("bin", op, node, self.mul())
        return node

    def mul(self) -> tuple:
        node = self.unary()
        while self.peek() in ("*", "/", "%"):
            op = self.take()
            node = ("bin", op, node, self.unary())
        return node

    def unary(self) -> tuple:
        if self.peek() == "-":
            self.deeper()
            self.take()
            node = ("neg", self.unary())
            self.nest -= 1
            return node
        return self.primary()

    def primary(self) -> tuple:
        tok = self.take()
        if tok.isdigit():
            return ("int", int(tok))
        if tok == "(":
            self.deeper()
            node = self.expr()
            self.take(")")
            self.nest -= 1
            return node
        if not _is_name(tok):
            raise CalcError(f"unexpected {tok!r}")
        if self.peek() != "(":
            return ("name", tok)
        self.take("(")
        args: list[tuple] = []
        if self.peek() != ")":
            args.append(self.expr())
            while self.peek() == ",":
                self.take()
                args.append(self.expr())
        self.take(")")
        return ("call", tok, tuple(args))

    def end(self):
        if self.peek() is not None:
            raise CalcError(f"unexpected {self.peek()!r} after the end of the expression")


def parse_line(text: str, path: str = "", line: int = 0) -> Optional[Decl]:
    """One declaration, or None for a blank/comment line. Raises CalcError."""
    toks = tokenize(text)
    if not toks:
        return None
    p = _Parser(toks)
    kind = p.take()
    if kind == "const":
        name = p.name()
        p.take("=")
        params: tuple[str, ...] = ()
    elif kind == "def":
        name, params = p.name(), _params(p)
        p.take("=")
    elif kind == "test":
        name = p.name()
        p.take(":")
        params = ()
    else:
        raise CalcError(f"a line starts with const, def or test, not {kind!r}")
    body = p.expr()
    p.end()
    return Decl(kind, name, params, body, path, line)


def _params(p: _Parser) -> tuple[str, ...]:
    p.take("(")
    names: list[str] = []
    if p.peek() != ")":
        names.append(p.name())
        while p.peek() == ",":
            p.take()
            names.append(p.name())
    p.take(")")
    if len(set(names)) != len(names):
        raise CalcError("a parameter name is repeated")
    return tuple(names)


# ------------------------------------------------------------------ programs
@dataclass
class Program:
    """The declarations of a repository; `errors` are "path:line: message" strings."""
    consts: dict[str, Decl] = field(default_factory=dict)
    funcs: dict[str, Decl] = field(default_factory=dict)
    tests: list[Decl] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)


def build(files: dict[str, str]) -> Program:
    """Parse every line of every file (sorted by path) into one namespace. Never raises."""
    prog = Program()
    for path in sorted(files):
        for no, text in enumerate(files[path].split("\n"), start=1):
            try:
                decl = parse_line(text, path, no)
            except CalcError as err:
                prog.errors.append(f"{path}:{no}: {err}")
                continue
            except RecursionError:
                prog.errors.append(f"{path}:{no}: expression nested too deeply")
                continue
            if decl is not None:
                _add(prog, decl)
    return prog


def with_decl(prog: Program, decl: Decl) -> Program:
    """`prog` with one const/def replaced (no re-parse of the other lines)."""
    out = Program(consts=dict(prog.consts), funcs=dict(prog.funcs), tests=prog.tests,
                  errors=prog.errors)
    (out.consts if decl.kind == "const" else out.funcs)[decl.name] = decl
    return out


def _add(prog: Program, decl: Decl) -> None:
    if decl.kind == "test":
        prog.tests.append(decl)
        return
    where = prog.consts.get(decl.name) or prog.funcs.get(decl.name)
    if where is not None:
        prog.errors.append(f"{decl.path}:{decl.line}: {decl.name} is already defined at "
                           f"{where.path}:{where.line}")
        return
    (prog.consts if decl.kind == "const" else prog.funcs)[decl.name] = decl


# ------------------------------------------------------------------ evaluator
class _Eval:
    """Evaluates ASTs of one program under a step budget and a depth limit."""

    def __init__(self, prog: Program, budget: int = STEP_BUDGET):
        self.prog, self.budget, self.depth = prog, budget, 0
        self.const_values: dict[str, int] = {}
        self.evaluating: set[str] = set()

    def const(self, name: str) -> int:
        if name in self.const_values:
            return self.const_values[name]
        if name in self.evaluating:
            raise CalcError(f"constant {name} is defined in terms of itself")
        self.evaluating.add(name)
        value = self.eval(self.prog.consts[name].body, {})
        self.evaluating.discard(name)
        self.const_values[name] = value
        return value

    def eval(self, node: tuple, env: dict[str, int]) -> int:
        self.budget -= 1
        if self.budget < 0:
            raise CalcError("step budget exhausted (endless recursion?)")
        self.depth += 1
        if self.depth > MAX_DEPTH:
            raise CalcError(f"too deep (more than {MAX_DEPTH} nested calls/expressions)")
        try:
            return _check(self._node(node, env))
        finally:
            self.depth -= 1

    def _node(self, node: tuple, env: dict[str, int]) -> int:
        kind = node[0]
        if kind == "int":
            return node[1]
        if kind == "name":
            return self._name(node[1], env)
        if kind == "call":
            return self._call(node[1], node[2], env)
        if kind == "neg":
            return -self.eval(node[1], env)
        if kind == "not":
            return int(not self.eval(node[1], env))
        if kind == "and":
            return int(bool(self.eval(node[1], env)) and bool(self.eval(node[2], env)))
        if kind == "or":
            return int(bool(self.eval(node[1], env)) or bool(self.eval(node[2], env)))
        if kind == "if":
            return self.eval(node[2] if self.eval(node[1], env) else node[3], env)
        return _binop(node[1], self.eval(node[2], env), self.eval(node[3], env))

    def _name(self, name: str, env: dict[str, int]) -> int:
        if name in env:
            return env[name]
        if name in self.prog.consts:
            return self.const(name)
        if name in self.prog.funcs:
            raise CalcError(f"{name} is a function; call it as {name}(...)")
        raise CalcError(f"unknown name {name}")

    def _call(self, name: str, args: tuple, env: dict[str, int]) -> int:
        fn = self.prog.funcs.get(name)
        if fn is None:
            raise CalcError(f"unknown function {name}" if name not in self.prog.consts
                            else f"{name} is a constant, not a function")
        if len(args) != len(fn.params):
            raise CalcError(f"{name} takes {len(fn.params)} argument(s), got {len(args)}")
        values = [self.eval(a, env) for a in args]
        return self.eval(fn.body, dict(zip(fn.params, values)))


def _binop(op: str, a: int, b: int) -> int:
    if op == "+":
        return a + b
    if op == "-":
        return a - b
    if op == "*":
        return a * b
    if op in ("/", "%"):
        if b == 0:
            raise CalcError("division by zero")
        return a // b if op == "/" else a % b
    return int({"==": a == b, "!=": a != b, "<": a < b, "<=": a <= b, ">": a > b,
                ">=": a >= b}[op])


def _check(value: int) -> int:
    if abs(value) > MAX_VALUE:
        raise CalcError(f"overflow (a value beyond ±{MAX_VALUE})")
    return value


def evaluate(prog: Program, node: tuple, budget: int = STEP_BUDGET) -> int:
    """Value of one expression in `prog`. Raises CalcError (never anything else)."""
    try:
        return _Eval(prog, budget).eval(node, {})
    except RecursionError:   # belt and braces: the depth limit should come first
        raise CalcError("too deep") from None


@dataclass
class TestOutcome:
    name: str
    passed: bool
    message: str               # "" when passed
    actual: Optional[int] = None
    expected: Optional[int] = None


def run_test(prog: Program, test: Decl) -> TestOutcome:
    """A test passes when its expression is non-zero. For `lhs == rhs` tests a failure
    reports both sides."""
    body = test.body
    try:
        if body[0] == "bin" and body[1] == "==":
            ev = _Eval(prog)
            actual, expected = ev.eval(body[2], {}), ev.eval(body[3], {})
            ok = actual == expected
            msg = "" if ok else f"expected {expected}, got {actual}"
            return TestOutcome(test.name, ok, msg, actual, expected)
        ok = bool(evaluate(prog, body))
        return TestOutcome(test.name, ok, "" if ok else "condition is false")
    except CalcError as err:
        return TestOutcome(test.name, False, f"error: {err}")
    except RecursionError:
        return TestOutcome(test.name, False, "error: too deep")
