"""Results prose types no number: in each experiment README's "## Results" section, in
README.md's "## Results so far" and in experiments/README.md, every decimal number and
percentage sits inside a generated block (a findings block rendered by analysis/claims.py
from summary.json and the experiment's quantities, or publish's results block), so a
republished report cannot leave a stale number behind (issue 46, item 5)."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
EXPERIMENTS = ROOT / "experiments"

# a decimal (signed or not, the typographic minus too) or a percentage
NUMBER = re.compile(r"[+\-−]?\d+\.\d+|\d+(?:\.\d+)?\s?%")
BLOCKS = re.compile(r"<!-- (findings|results):begin[^>]*-->.*?<!-- \1:end -->", re.S)
CODE = re.compile(r"`[^`\n]*`")


def section(text: str, heading: str) -> str:
    """The text under `## heading` up to the next level-2 heading ('' when absent)."""
    m = re.search(rf"^## {re.escape(heading)}[ \t]*\n(.*?)(?=^## |\Z)", text, re.S | re.M)
    return m.group(1) if m else ""


def typed_numbers(text: str) -> list[str]:
    """Decimals and percentages of `text` outside generated blocks and inline code."""
    bare = CODE.sub("", BLOCKS.sub("", text))
    return [f"{m.group(0)!r} in: {bare[max(0, m.start() - 50):m.end() + 20]!r}"
            for m in NUMBER.finditer(bare)]


def checked() -> list[tuple[str, str]]:
    """(name, text to check) of every file the rule covers."""
    out = [("README.md: Results so far", section((ROOT / "README.md").read_text(),
                                                  "Results so far")),
           ("experiments/README.md", (EXPERIMENTS / "README.md").read_text())]
    for md in sorted(EXPERIMENTS.glob("*/README.md")):
        out.append((f"{md.relative_to(ROOT)}: Results", section(md.read_text(), "Results")))
    return out


@pytest.mark.parametrize("name,text", checked(), ids=[n for n, _ in checked()])
def test_results_prose_types_no_number(name, text):
    found = typed_numbers(text)
    assert not found, (f"{name}: numbers typed outside a findings/results block (move them "
                       f"into the findings template as named quantities):\n" + "\n".join(found))


def test_the_results_so_far_section_exists_and_is_generated():
    text = section((ROOT / "README.md").read_text(), "Results so far")
    assert "<!-- findings:begin " in text


def test_a_planted_typed_number_fails():
    md = EXPERIMENTS / "naive_trap" / "README.md"
    results = section(md.read_text(), "Results")
    assert "<!-- findings:begin findings.md -->" in results
    assert typed_numbers(results) == []
    for planted in ("naive submits 26.5% of episodes", "a change of -37.6 points",
                    "87 % of episodes", "down −4.2", "about 3% of them"):
        text = results.replace("<!-- findings:begin", f"\n{planted}\n\n<!-- findings:begin", 1)
        assert typed_numbers(text), planted
    # inside a generated block the same number is allowed
    inside = results.replace("<!-- findings:end -->", "naive submits 26.5%\n<!-- findings:end -->")
    assert typed_numbers(inside) == []
    # and a section that ends at the next level-2 heading only (### stays inside)
    assert section("## Results\n\nx\n### Interim\n1.5 points\n## Next\n2.5\n",
                   "Results") == "\nx\n### Interim\n1.5 points\n"


def _recount_first_turn_idk(run: Path, step: int) -> tuple[int, int]:
    rows = [json.loads(line) for line in (run / "eval.jsonl").open() if line.strip()]
    mine = [r for r in rows if r["step"] == step and r.get("decoding", "sampled") != "greedy"]
    first = sum(1 for r in mine if r["end_reason"] == "answer" and not r["answered"]
                and r["turns"] == 1)
    return first, len(mine)


def test_naive_trap_first_turn_idk_equals_a_recount_of_the_rows():
    """The quantity behind "says I don't know in the first turn" (endings.json, written by
    experiments/naive_trap/endings.py) is a recount of seed 0's committed eval rows: the
    share of first-turn "I don't know" endings, not of every "I don't know" ending."""
    exp = EXPERIMENTS / "naive_trap"
    q = json.loads((exp / "results" / "report" / "endings.json").read_text())
    seed0 = q["last"]["naive"]["0"]
    first, n = _recount_first_turn_idk(exp / "results" / "runs" / "+algo=grpo,+reward=naive,seed=0",
                                       q["last_step"])
    assert (seed0["idk_first_turn"], seed0["episodes"]) == (first, n)
    assert seed0["idk_first_turn"] / seed0["episodes"] == pytest.approx(first / n)
    assert seed0["idk_first_turn"] < seed0["idk"]      # first-turn is a part of all endings
    readme = (exp / "README.md").read_text()
    assert f"({first}/{n}) say it in the first turn" in readme


def test_every_image_a_readme_shows_exists():
    """The READMEs' figures (a figure no longer drawn, e.g. learning curves of a
    two-evaluation design, would be a broken link)."""
    import re
    root = Path(__file__).resolve().parents[2]
    files = [root / "README.md", *sorted((root / "experiments").glob("**/README.md")),
             *sorted((root / "docs").glob("*.md"))]
    missing = [f"{md.relative_to(root)}: {link}" for md in files
               for link in re.findall(r"!\[[^\]]*\]\(([^)\s]+)\)", md.read_text())
               if not link.startswith("http") and not (md.parent / link).is_file()]
    assert missing == []
