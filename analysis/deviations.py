"""Deviations from an experiment's pre-registration (analysis.yaml `preregistration`,
`results_commit`, `unrun`): every commit that touched the code of the runs or of the
analysis (ablate/, analysis/) between the commit that pre-registered the experiment and
the one that committed its results, and the pre-registered arms that never ran. Read from
git; hashes are cut to 10 characters here (git's own abbreviation grows with the
repository, which would make a report differ from one clone to the next)."""
from __future__ import annotations

import subprocess
from pathlib import Path

from analysis.errors import AnalysisError

ROOT = Path(__file__).resolve().parents[1]
CODE = ("ablate", "analysis")   # the code a run executes and the code that analyses it


def _git(*args: str) -> str:
    done = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True)
    if done.returncode != 0:
        raise AnalysisError(f"git {' '.join(args)}: {done.stderr.strip() or 'failed'}")
    return done.stdout


def deviations(spec: dict, where: str, ran=()) -> dict | None:
    """{preregistration, results_commit, commits: [{commit, subject, in_runs}], unrun:
    [...]}, or None when analysis.yaml names no pre-registration commit. `ran`: the commits
    the runs' code.json name; a commit is `in_runs` when one of them contains it (so it
    could change what was measured; the others can change only the analysis)."""
    pre, post = spec.get("preregistration"), spec.get("results_commit")
    unrun = [str(u) for u in spec.get("unrun") or []]
    if pre is None:
        if post is not None or unrun:
            raise AnalysisError(f"{where}: results_commit and unrun need preregistration: "
                                "the commit that pre-registered the experiment")
        return None
    if post is None:
        raise AnalysisError(f"{where}: preregistration without results_commit (the commit "
                            "that committed the results)")
    try:
        ends = [_git("rev-parse", "--verify", f"{c}^{{commit}}").strip() for c in (pre, post)]
    except AnalysisError as e:
        raise AnalysisError(f"{where}: preregistration/results_commit: {e}") from None
    log = _git("log", "--format=%H%x09%s", f"{ends[0]}..{ends[1]}", "--", *CODE)
    inside = _reachable(ends[0], {str(r) for r in ran if r})
    commits = [{"commit": h[:10], "subject": s[:160], "in_runs": h in inside}
               for h, s in (line.split("\t", 1) for line in log.splitlines() if line)]
    return {"preregistration": ends[0][:10], "results_commit": ends[1][:10],
            "paths": list(CODE), "commits": commits, "unrun": unrun}


def _reachable(since: str, heads: set[str]) -> set[str]:
    """The commits after `since` that some head contains (one git call per head; a head
    git does not know contains none)."""
    out: set[str] = set()
    for head in sorted(heads):
        try:
            out.update(_git("rev-list", f"{since}..{head}").split())
        except AnalysisError:
            continue
    return out
