"""Issue 14's seam check: no email-specific name outside the email environment. The
names come from the email environment itself: its tool names, and message_id (the id
argument the email grammar of the action masks names)."""
import ast
import re
import sys
from pathlib import Path

from ablate.envs.email.tools import TOOL_SCHEMAS

ROOT = Path(__file__).resolve().parents[2]
# every generic package (all of ablate/ but the worlds, the apps and recipes), and the
# analysis; each must exist, so a moved package cannot leave the check scanning nothing
GENERIC = [ROOT / "ablate" / p for p in ("core", "protocol", "loop", "harness", "algos",
                                          "agents", "learners", "samplers", "models",
                                          "rewards")] + [
    ROOT / "analysis"]
# `hops` is EnronHop's word for its difficulty: the generic code reads Task.difficulty
# and the column the world names (Declared.breakdown_label). The analysis still reads a
# `hops` column of old eval rows (analysis/world.py), so only ablate/ is held to it


def email_names() -> set[str]:
    return {s["function"]["name"] for s in TOOL_SCHEMAS} | {"message_id"}


def code_lines(path: Path) -> list[str]:
    """The lines of code of a module: docstrings and comments left out (a docstring may
    name EnronHop as an example)."""
    src = path.read_text()
    docs = set()
    for node in ast.walk(ast.parse(src)):
        body = getattr(node, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.Expr) \
                and isinstance(getattr(body[0], "value", None), ast.Constant) \
                and isinstance(body[0].value.value, str):
            docs.update(range(body[0].lineno, body[0].end_lineno + 1))
    return [line.split("#")[0] for i, line in enumerate(src.splitlines(), 1) if i not in docs]


def offending() -> list[str]:
    hits = []
    for base in GENERIC:
        assert base.is_dir(), f"{base} does not exist: the check would scan nothing"
        for path in sorted(base.rglob("*.py")):
            code = "\n".join(code_lines(path))
            where = str(path.relative_to(ROOT))
            hits += [f"{where}: {n}" for n in sorted(email_names() | {"inbox"})
                     if re.search(rf"\b{n}", code)]
            if where.startswith("ablate/") and re.search(r"\bhops", code):
                hits.append(f"{where}: hops")
    return hits


def test_the_check_finds_a_planted_name(tmp_path, monkeypatch):
    pkg = tmp_path / "ablate" / "loop"
    pkg.mkdir(parents=True)
    (pkg / "m.py").write_text('"""search_inbox in a docstring is an example."""\n'
                              "x = 1  # read_email in a comment\n"
                              "def f(t):\n    return t.inbox_address, t.hops\n")
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    monkeypatch.setattr(sys.modules[__name__], "GENERIC", [pkg])
    assert offending() == ["ablate/loop/m.py: inbox", "ablate/loop/m.py: hops"]


def test_email_names_are_known():
    assert email_names() == {"search_inbox", "read_email", "return_final_answer",
                             "message_id"}


def test_no_email_names_outside_the_email_environment():
    assert offending() == []


def test_the_generic_core_asks_the_environment():
    """Preflight, the loop and the protocol import nothing of the email environment: its
    prompt budget, judge, schema and default reward are the environment's own."""
    core = [*sorted((ROOT / "ablate" / "apps").glob("*.py")),
            *sorted((ROOT / "ablate" / "loop").glob("*.py")),
            *sorted((ROOT / "ablate" / "protocol").glob("*.py")),
            *(ROOT / "ablate" / "envs" / f for f in ("registry.py", "conformance.py"))]
    hits = [str(p.relative_to(ROOT)) for p in core if "ablate.envs.email" in p.read_text()]
    assert hits == []
