"""The layer contract (setup.cfg [importlinter], docs/architecture.md): imports point down
only, function-local ones included, and no module of ablate/ sits on an import cycle."""
from __future__ import annotations

import ast
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def module_graph(package: Path) -> dict[str, set[str]]:
    """module -> the package's modules it imports (every import statement, at any depth;
    `from p import m` names the module p.m when there is one, else p, as grimp does)."""
    base = package.parent
    mods = {}
    for path in package.rglob("*.py"):
        name = ".".join(path.relative_to(base).with_suffix("").parts)
        mods[name.removesuffix(".__init__")] = path
    graph: dict[str, set[str]] = {m: set() for m in mods}
    for mod, path in mods.items():
        is_pkg = path.name == "__init__.py"
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            for target in _targets(mod, is_pkg, node):
                while target and target not in mods:
                    target = target.rpartition(".")[0]
                if target and target != mod:
                    graph[mod].add(target)
    return graph


def _targets(mod: str, is_pkg: bool, node) -> list[str]:
    if isinstance(node, ast.Import):
        return [a.name for a in node.names]
    if not isinstance(node, ast.ImportFrom):
        return []
    if node.level:
        parts = mod.split(".") if is_pkg else mod.split(".")[:-1]
        parts = parts[:len(parts) - node.level + 1]
        stem = ".".join(parts + ([node.module] if node.module else []))
    else:
        stem = node.module
    return [f"{stem}.{a.name}" for a in node.names]


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan 1972)."""
    index, low, stack, on, out = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    sys.setrecursionlimit(max(10_000, sys.getrecursionlimit()))
    for v in graph:
        if v not in index:
            visit(v)
    return out


def test_no_import_cycle_in_ablate():
    assert cycles(module_graph(ROOT / "ablate")) == []


def test_cycle_finder_finds_a_function_local_cycle(tmp_path):
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from pkg import b\n")
    (pkg / "b.py").write_text("def f():\n    from pkg.a import x\n")
    (pkg / "c.py").write_text("import pkg.a\n")
    assert cycles(module_graph(pkg)) == [["pkg.a", "pkg.b"]]


@pytest.mark.skipif(shutil.which("lint-imports") is None, reason="import-linter not installed")
def test_import_contract_is_kept():
    run = subprocess.run(["lint-imports", "--config", str(ROOT / "setup.cfg")], cwd=ROOT,
                         capture_output=True, text=True)
    assert run.returncode == 0, run.stdout[-3000:]
    assert "0 broken" in run.stdout


def local_imports(package: Path, root: Path = ROOT) -> list[tuple[str, int, bool]]:
    """(file, line, has a comment) of each function-local import of an ablate module; the
    comment sits on the statement's first or last line or on the line just above it."""
    out = []
    for path in sorted(package.rglob("*.py")):
        lines = path.read_text().splitlines()
        tree = ast.parse("\n".join(lines), str(path))
        found = {node.lineno: node for fn in ast.walk(tree)
                 if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef))
                 for node in ast.walk(fn) if _of_ablate(node)}
        for line, node in sorted(found.items()):
            above = lines[line - 2].strip() if line > 1 else ""
            said = "#" in lines[line - 1] or "#" in lines[node.end_lineno - 1] or \
                above.startswith("#")
            out.append((str(path.relative_to(root)), line, said))
    return out


def _of_ablate(node) -> bool:
    if isinstance(node, ast.ImportFrom):
        return bool(node.level) or (node.module or "").split(".")[0] == "ablate"
    return isinstance(node, ast.Import) and any(
        a.name.split(".")[0] == "ablate" for a in node.names)


# recipes/ is exempt: its commands (python -m ablate.recipes.*) are scripts at the top of
# the layers that nothing imports; each command imports what it needs when it runs
EXEMPT = ("ablate/recipes/",)


def test_every_function_local_import_of_ablate_states_its_reason():
    """docs/architecture.md: a function-local import of an ablate module only for a
    measured import-time reason (or a cycle), stated in its comment; their count is
    written there too."""
    found = [x for x in local_imports(ROOT / "ablate") if not x[0].startswith(EXEMPT)]
    silent = [f"{f}:{line}" for f, line, said in found if not said]
    assert silent == [], "function-local imports without their reason: " + ", ".join(silent)
    doc = " ".join((ROOT / "docs" / "architecture.md").read_text().split())
    assert f"{len(found)} function-local imports of ablate modules" in doc, len(found)


def test_the_local_import_finder_reads_comments(tmp_path):
    pkg = tmp_path / "ablate"
    pkg.mkdir()
    (pkg / "m.py").write_text("def f():\n    from ablate import x\n\n"
                              "def g():\n    # deferred: x is slow\n    from ablate import y\n"
                              "    import os\n    from . import z  # cycle\n")
    got = [(line, said) for _, line, said in local_imports(pkg, tmp_path)]
    assert got == [(2, False), (6, True), (8, True)]


def test_no_importlib_of_ablate_modules():
    """An import of an ablate module is an import statement the layer checks can see."""
    hits = []
    for path in sorted((ROOT / "ablate").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(
                    node.func, "id", "")) in ("import_module", "__import__") and node.args \
                    and isinstance(node.args[0], ast.Constant) \
                    and str(node.args[0].value).split(".")[0] == "ablate":
                hits.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert hits == []


# what each function-local import keeps out (their comments give the measured cost): the
# module imported first must not load any of the modules listed after it
DEFERRED = {
    "ablate.apps.cli": ("peft", "deepspeed", "vllm", "ablate.samplers.vllm",
                        "ablate.samplers.hf", "ablate.learners.lora"),
    "ablate.rewards": ("torch", "ablate.models.loading"),
    "ablate.harness.rollout": ("ablate.envs",),   # the harness reads ablate.protocol only
    "ablate.harness.chat": ("torch",),
    "ablate.algos": ("transformers", "ablate.learners", "ablate.envs"),
    "ablate.apps.memory_plan": ("transformers", "ablate.learners"),
    "ablate.loop.async_rollout": ("transformers", "ablate.learners"),
}


@pytest.mark.parametrize("module", sorted(DEFERRED))
def test_deferred_imports_stay_deferred(module):
    code = (f"import sys, {module}; print(' '.join(m for m in {DEFERRED[module]!r} "
            "if m in sys.modules))")
    run = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                         text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    assert run.stdout.split() == [], f"import {module} loads {run.stdout.strip()}"
