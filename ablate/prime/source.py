"""Reading a Prime TOML file: TOML 1.1 (the article's file has a multi-line inline table,
which TOML 1.0 parsers such as Python's tomllib reject), the line of every key, and the
file flattened to (dotted key, value, line) rows.

A key's path keeps array-of-tables indices (`env[0].args`); `normal()` drops them
(`env[].args`), the form the rule tables of schema.py are written in.
"""
from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any, Callable, Iterator

try:                       # TOML 1.1 (tomli >= 2.4); tomllib only reads TOML 1.0
    import tomli as _toml
except ImportError:        # pragma: no cover - tomli is a dependency
    import tomllib as _toml


class PrimeError(Exception):
    """Bad input, said in one line: FILE:LINE: KEY: what is wrong."""

    def __init__(self, where: str, key: str, message: str):
        super().__init__(f"{where}: {key}: {message}" if key else f"{where}: {message}")


class Source:
    """One TOML file: its data, and the line of each key (1-based)."""

    def __init__(self, path: str | Path):
        self.path = str(path)
        try:
            # utf-8-sig: a byte-order mark (Windows editors write one) is not a key
            text = Path(path).read_text(encoding="utf-8-sig")
        except OSError as exc:
            raise PrimeError(self.path, "", f"cannot read the file ({exc.strerror})") from None
        except UnicodeDecodeError as exc:
            raise PrimeError(self.path, "", f"not UTF-8 text (byte {exc.start}): TOML "
                             "files are UTF-8; save it as UTF-8") from None
        try:
            self.data = _toml.loads(text)
        except _toml.TOMLDecodeError as exc:
            line = getattr(exc, "lineno", None) or 1
            hint = "" if _toml.__name__ == "tomli" else \
                " (TOML 1.1 needs: pip install tomli==2.5.0)"
            raise PrimeError(f"{self.path}:{line}", "", f"not valid TOML: "
                             f"{getattr(exc, 'msg', str(exc))}{hint}") from None
        self.lines = key_lines(text)
        if not self.data:
            raise PrimeError(f"{self.path}:1", "", "the file sets no keys: a Prime Lab or "
                             "prime-rl config names at least its model, max_steps and "
                             "environment (docs/prime.md)")
        check_numbers(self)

    def where(self, key: str) -> str:
        """FILE:LINE of `key`, else of its nearest ancestor that has a line."""
        while key:
            inner = [n for k, n in self.lines.items()
                     if k == key or k.startswith((f"{key}.", f"{key}["))]
            if inner:   # the key, else its first sub-key (`[inference.parallel]`)
                return f"{self.path}:{self.lines.get(key, min(inner))}"
            key = parent_key(key)
        return f"{self.path}:1"

    def line(self, key: str) -> int:
        return int(self.where(key).rsplit(":", 1)[1])


def parent_key(key: str) -> str:
    head, _, tail = key.rpartition(".")
    if tail.endswith("]") and "[" in tail:
        return key[:key.rindex("[")]
    return head


def normal(key: str) -> str:
    """`env[0].args` -> `env[].args`."""
    return re.sub(r"\[\d+\]", "[]", key)


# ------------------------------------------------------------------ the line of each key
_STRING = re.compile(r'"""[\s\S]*?"""|\'\'\'[\s\S]*?\'\'\'|"(?:\\.|[^"\\])*"|\'[^\']*\'')
_HEADER = re.compile(r"^\s*(\[\[?)\s*([^\[\]]+?)\s*\]\]?\s*$")
_KEY = re.compile(r"^\s*([A-Za-z0-9_\-.\"' ]+?)\s*=")


def _bare(line: str) -> str:
    """The line without strings and comment (quoted text cannot open a bracket)."""
    line = _STRING.sub('""', line)
    return line.split("#", 1)[0]


def _dotted(key: str) -> list[str]:
    return [p.strip().strip("\"'") for p in key.split(".")]


class _Scanner:
    """Walks the text line by line, tracking the table, array-of-tables indices and
    open inline tables / arrays."""

    def __init__(self):
        self.lines: dict[str, int] = {}
        self.table = ""
        self.counts: dict[str, int] = {}
        self.stack: list[tuple[str, str]] = []   # ("{", key prefix) | ("[", "")

    def header(self, double: bool, name: str, no: int) -> None:
        parts, path = _dotted(name), ""
        for i, part in enumerate(parts):
            path = f"{path}.{part}" if path else part
            last = i == len(parts) - 1
            if double and last:
                self.counts[path] = self.counts.get(path, 0) + 1
            if path in self.counts:
                path = f"{path}[{self.counts[path] - 1}]"
        self.table = path
        self.lines.setdefault(path, no)

    def key(self, name: str, rest: str, no: int) -> None:
        prefix = self.stack[-1][1] if self.stack else self.table
        path = ".".join(p for p in [prefix, *_dotted(name)] if p)
        self.lines.setdefault(path, no)
        self.brackets(rest, path)

    def brackets(self, text: str, path: str) -> None:
        for ch in text:
            if ch in "{[":
                self.stack.append((ch, path if ch == "{" else ""))
            elif ch in "}]" and self.stack:
                self.stack.pop()

    def feed(self, raw: str, no: int) -> None:
        line = _bare(raw)
        if self.stack and self.stack[-1][0] == "[":
            self.brackets(line, "")
            return
        head = _HEADER.match(line) if not self.stack else None
        if head:
            self.header(head.group(1) == "[[", head.group(2), no)
            return
        for item in _items(line) if self.stack else [line]:
            match = _KEY.match(item)
            if match:
                self.key(match.group(1), item[match.end():], no)
            else:
                self.brackets(item, "")


def _items(line: str) -> list[str]:
    """`a = 1, b = 2` inside an open inline table -> its items (top-level commas)."""
    out, depth, cur = [], 0, ""
    for ch in line:
        depth += ch in "{[" and 1 or 0
        depth -= ch in "}]" and 1 or 0
        if ch == "," and depth == 0:
            out.append(cur)
            cur = ""
        else:
            cur += ch
    return out + [cur]


def key_lines(text: str) -> dict[str, int]:
    scanner = _Scanner()
    for no, raw in enumerate(text.splitlines(), start=1):
        scanner.feed(raw, no)
    for path, no in list(scanner.lines.items()):   # inline tables on one line
        _inline_keys(path, no, text.splitlines()[no - 1], scanner.lines)
    return scanner.lines


def _inline_keys(path: str, no: int, raw: str, lines: dict[str, int]) -> None:
    """`args = { a = 1, b = 2 }` on one line: a and b are on that line too."""
    line = _bare(raw)
    if "{" not in line:
        return
    inner = line[line.index("{") + 1:line.rindex("}")] if "}" in line else ""
    for item in _items(inner):
        match = _KEY.match(item)
        if match:
            lines.setdefault(f"{path}." + ".".join(_dotted(match.group(1))), no)


# ------------------------------------------------------------------ numbers
INT64 = (-2 ** 63, 2 ** 63 - 1)   # TOML 1.1 integers are 64-bit; tomli reads any size


def check_numbers(src: Source) -> None:
    """Every number of the file finite and every integer 64-bit (TOML 1.1: `inf`, `nan`
    are floats a config never means, and tomli accepts integers of any size): else one
    line naming FILE:LINE and the key."""
    for key, value in _scalars(src.data):
        if isinstance(value, bool):
            continue
        if isinstance(value, float) and not math.isfinite(value):
            raise PrimeError(src.where(key), key, f"{value!r} is not a finite number: "
                             "give a number")
        if isinstance(value, int) and not INT64[0] <= value <= INT64[1]:
            raise PrimeError(src.where(key), key, f"{value} does not fit in 64 bits "
                             "(TOML's integer range): give a smaller number")


def _scalars(data: Any, prefix: str = "") -> Iterator[tuple[str, Any]]:
    """(key, value) of every scalar, inside tables, arrays of tables and arrays (an
    array's items under the array's key)."""
    if isinstance(data, dict):
        for k, v in data.items():
            yield from _scalars(v, f"{prefix}.{k}" if prefix else str(k))
    elif isinstance(data, list):
        tables = bool(data) and all(isinstance(x, dict) for x in data)
        for i, item in enumerate(data):
            yield from _scalars(item, f"{prefix}[{i}]" if tables else prefix)
    else:
        yield prefix, data


# ------------------------------------------------------------------ flattening
def flatten(data: Any, leaf: Callable[[str], bool], prefix: str = "") -> Iterator[tuple]:
    """(key, value) of every leaf: a scalar, a list of scalars, an empty table, or a table
    `leaf(normal key)` says is taken whole (free-form `args`)."""
    if isinstance(data, dict) and data and not (prefix and leaf(normal(prefix))):
        for k, v in data.items():
            yield from flatten(v, leaf, f"{prefix}.{k}" if prefix else str(k))
    elif isinstance(data, list) and data and all(isinstance(x, dict) for x in data):
        for i, item in enumerate(data):
            yield from flatten(item, leaf, f"{prefix}[{i}]")
    else:
        yield prefix, data
