"""Issue 14's seam check: no email-specific name outside the email environment. The
names come from the email environment itself: its tool names, and message_id (the id
argument the email grammar of the action masks names)."""
from pathlib import Path

from ablate.envs.email.tools import TOOL_SCHEMAS

ROOT = Path(__file__).resolve().parents[1]
GENERIC = [ROOT / "ablate" / "harness", ROOT / "ablate" / "rewards", ROOT / "ablate" / "cell.py",
           ROOT / "analysis"]


def email_names() -> set[str]:
    return {s["function"]["name"] for s in TOOL_SCHEMAS} | {"message_id"}


def offending() -> list[str]:
    hits = []
    for base in GENERIC:
        for path in ([base] if base.is_file() else sorted(base.rglob("*.py"))):
            text = path.read_text()
            hits += [f"{path.relative_to(ROOT)}: {n}" for n in sorted(email_names())
                     if n in text]
    return hits


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
            *(ROOT / "ablate" / "envs" / f for f in ("base.py", "registry.py", "config.py",
                                                    "conformance.py"))]
    hits = [str(p.relative_to(ROOT)) for p in core if "ablate.envs.email" in p.read_text()]
    assert hits == []
