"""Experiment hygiene checked before publishing: a confirmatory comparison needs seeds
and held-out questions that no tuning used, and held-out questions that are no other
experiment's confirmation set (experiments/ledger.yaml records what pilots and searches
used; each experiment's held-out range is read from its runs' configs). An experiment
that cannot meet this says so in its analysis.yaml (`exploratory: <why>`) and is
published as exploratory."""
from __future__ import annotations

from pathlib import Path

from analysis.collect import find_run_dirs, flatten, read_config
from analysis.errors import AnalysisError


def held_out(dirs: list[Path]) -> tuple[set, set]:
    """(seeds, {(env, gen_seed, first, last)}) of the runs below `dirs`: the evaluation
    questions eval.offset .. eval.offset + eval.num_tasks - 1 of the test split."""
    seeds, ranges = set(), set()
    for d in dirs:
        for _, cfg_file in find_run_dirs(d):
            c = flatten(read_config(cfg_file))
            seeds.add(c.get("seed"))
            first = int(c.get("eval.offset") or 0)
            ranges.add((c.get("env.name"), c.get("env.gen_seed") or 0, first,
                        first + int(c.get("eval.num_tasks") or 0) - 1))
    return seeds, ranges


def _overlap(a: tuple, b: tuple) -> bool:
    return a[:2] == b[:2] and a[2] <= b[3] and b[2] <= a[3]


def _tuning(ledger: dict) -> list[tuple[str, set, set]]:
    out = []
    for name, entry in (ledger or {}).items():
        t = (entry or {}).get("tuning") or {}
        key = ((entry or {}).get("env"), (entry or {}).get("gen_seed") or 0)
        out.append((name, set(t.get("seeds") or []),
                    {(*key, int(a), int(b)) for a, b in t.get("questions") or []}))
    return out


def experiment_dirs(exp: Path, settings: dict) -> list[Path]:
    return [exp / "results" / "runs"] + [exp / d for d in (settings.get("include") or [])]


def check(exp: Path, settings: dict, root: Path) -> None:
    """One-line refusal when the confirmatory cells of `exp` reuse a seed or questions
    recorded as tuning in root/ledger.yaml, or evaluate questions of another confirmatory
    experiment under `root`; nothing to check when analysis.yaml declares `exploratory`."""
    if settings.get("exploratory"):
        return
    ledger_file = root / "ledger.yaml"
    ledger = read_config(ledger_file) if ledger_file.exists() else {}
    seeds, ranges = held_out(experiment_dirs(exp, settings))
    where = f"{exp}: a confirmatory comparison"
    for name, t_seeds, t_ranges in _tuning(ledger):
        reused = sorted(seeds & t_seeds, key=str)
        hit = [r for r in ranges if any(_overlap(r, t) for t in t_ranges)]
        if reused and hit:
            raise AnalysisError(f"{where} reuses seed(s) {', '.join(map(str, reused))} that "
                                f"tuned {name} ({ledger_file}) on the same task set; use "
                                "fresh seeds, or declare `exploratory: <why>` in analysis.yaml")
        if hit:
            raise AnalysisError(f"{where} evaluates questions {hit[0][2]}-{hit[0][3]} that "
                                f"tuned {name} ({ledger_file}); use a fresh range, or declare "
                                "`exploratory: <why>` in analysis.yaml")
    for other in sorted(p.parent for p in root.glob("*/analysis.yaml")):
        if other.resolve() == exp.resolve() or not (other / "results" / "runs").exists():
            continue
        o_settings = read_config(other / "analysis.yaml")
        if o_settings.get("exploratory"):
            continue
        _, o_ranges = held_out([other / "results" / "runs"])
        hit = [(r, o) for r in ranges for o in o_ranges if _overlap(r, o)]
        if hit:
            r, o = hit[0]
            raise AnalysisError(f"{where} evaluates questions {r[2]}-{r[3]}, which overlap "
                                f"{other.name}'s confirmation set {o[2]}-{o[3]}; use a fresh "
                                "range, or declare `exploratory: <why>` in analysis.yaml")
