"""The backend axes declare themselves (ablate.core.registry.Declaration): outside the
packages that register them, code asks a sampler, learner or algorithm what it can do,
never which one it is. This counts the comparisons on their registered names elsewhere,
as test_layers counts imports."""
import ast
from pathlib import Path

from ablate.algos.registry import ALGORITHMS
from ablate.learners import LEARNERS
from ablate.samplers import SAMPLERS

ROOT = Path(__file__).resolve().parents[2]
OWNERS = ("ablate/samplers/", "ablate/learners/", "ablate/algos/")
ALLOWED_OUTSIDE = 3     # issue 60: at most three, each with its reason beside it


def _strings(node) -> set[str]:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return {node.value}
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return set().union(*(_strings(e) for e in node.elts)) if node.elts else set()
    return set()


def name_comparisons(path: Path, names: set[str]) -> list[str]:
    """file:line of each ==, !=, in, not in whose constant side is a backend's name."""
    hits = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if not isinstance(node, ast.Compare):
            continue
        if not all(isinstance(op, (ast.Eq, ast.NotEq, ast.In, ast.NotIn)) for op in node.ops):
            continue
        if any(_strings(side) & names for side in [node.left, *node.comparators]):
            hits.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    return hits


def test_name_comparisons_finds_what_it_counts(tmp_path):
    src = tmp_path / "m.py"
    src.write_text('a = cfg.sampler.name == "vllm"\nb = x in ("hf", "other")\n'
                   'c = y == "unrelated"\nd = len(z) > 2\n')
    global ROOT
    root, ROOT = ROOT, tmp_path
    try:
        assert name_comparisons(src, {"vllm", "hf"}) == ["m.py:1", "m.py:2"]
    finally:
        ROOT = root


def test_backend_names_are_compared_only_where_they_register():
    names = set(SAMPLERS.builtin()) | set(LEARNERS.builtin()) | set(ALGORITHMS.builtin())
    hits = [hit for path in sorted((ROOT / "ablate").rglob("*.py"))
            if not str(path.relative_to(ROOT)).startswith(OWNERS)
            for hit in name_comparisons(path, names)]
    assert len(hits) <= ALLOWED_OUTSIDE, hits
