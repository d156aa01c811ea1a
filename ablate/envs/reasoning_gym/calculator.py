"""The optional calculator tool of `env=reasoning_gym`: arithmetic on numbers with
+ - * / // % ** and parentheses, evaluated over Python's `ast` (never `eval`), with
bounded sizes so model text cannot make it hang."""
from __future__ import annotations

import ast
import operator
from fractions import Fraction

MAX_CHARS = 200
MAX_EXPONENT = 64
MAX_DIGITS = 200

_BINARY = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
           ast.Div: operator.truediv, ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod,
           ast.Pow: operator.pow}
_UNARY = {ast.UAdd: operator.pos, ast.USub: operator.neg}


class CalcError(ValueError):
    """An expression the calculator does not take (the message is shown to the model)."""


def evaluate(expression: str) -> str:
    """The value of `expression` as text: an integer when exact, else a decimal."""
    if not isinstance(expression, str) or not expression.strip():
        raise CalcError("expression must be a non-empty string")
    if len(expression) > MAX_CHARS:
        raise CalcError(f"expression longer than {MAX_CHARS} characters")
    text = expression.replace("×", "*").replace("÷", "/").replace("^", "**")
    try:
        tree = ast.parse(text.strip(), mode="eval")
    except SyntaxError:
        raise CalcError("not an arithmetic expression") from None
    value = _eval(tree.body)
    return _format(value)


def _eval(node: ast.AST) -> Fraction:
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)) \
            and not isinstance(node.value, bool):
        return Fraction(node.value)
    if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
        return _UNARY[type(node.op)](_eval(node.operand))
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
        left, right = _eval(node.left), _eval(node.right)
        if isinstance(node.op, ast.Pow):
            if right.denominator != 1 or abs(right) > MAX_EXPONENT:
                raise CalcError(f"exponents must be integers of at most {MAX_EXPONENT}")
        if isinstance(node.op, (ast.Div, ast.FloorDiv, ast.Mod)) and right == 0:
            raise CalcError("division by zero")
        if isinstance(node.op, ast.Pow) and left == 0 and right < 0:
            raise CalcError("division by zero")
        value = _BINARY[type(node.op)](left, right)
        value = Fraction(value)
        if len(str(abs(value.numerator))) > MAX_DIGITS:
            raise CalcError("number too large")
        return value
    raise CalcError("only numbers, + - * / // % ** and parentheses are allowed")


def _format(value: Fraction) -> str:
    if value.denominator == 1:
        return str(value.numerator)
    return f"{float(value):.10g}"
