"""What ran, read from the runs' config.yaml and eval rows (issue 63 item 4): the world
(`env.name`), the reward scheme (`reward.name`) and the weight of each of its components
(`reward.weights.<component>`, 1.0 unless set: docs/rewards.md), for the report's header
and the figures' captions; and the guard of `--metric reward/<component>`: an eval row's
`reward/<c>` is the weighted component (weight x value, ablate/rewards/compute.py), so
cells weighted differently differ by construction (a weight of 0 makes every row 0).
That metric is analysed only where every run weights the component by 1, so its rows
hold the component itself; otherwise one line names the behaviour column to use."""
from __future__ import annotations

import itertools

from analysis.collect import Cell, Run, Sweep
from analysis.errors import AnalysisError

# components whose scale is a knob of its own rather than reward.weights.<c>
# (ablate/rewards/compute.py: format_penalty per malformed call; the world-model weight)
KNOBS = {"format_penalty": "reward.format_penalty", "world_model": "reward.world_model.weight"}
# the eval.jsonl column that counts what a component pays for (ablate/rewards/schemes.py,
# ablate/envs/coderepair/rewards.py; docs/rewards.md's table of components)
COLUMNS = {"correct": "correct", "correctness": "correct",
           "wrong": "correct and --metric answered (a wrong answer: answered, not correct)",
           "format_penalty": "malformed_calls", "test_bonus": "test_runs",
           "witness": "evidence_read", "process": "searches", "efficiency": "turns"}


def weight_key(component: str) -> str:
    return KNOBS.get(component, f"reward.weights.{component}")


def weight(run: Run, component: str) -> float:
    """The run's weight of `component`: its config's, 1.0 unless set (a knob: 0.0)."""
    default = 0.0 if component in KNOBS else 1.0
    value = run.config.get(weight_key(component), default)
    if component == "world_model" and not run.config.get("reward.world_model.enable"):
        value = 0.0
    return float(value)


def components(run: Run, rows: int = 50) -> list[str]:
    """The reward components the run's eval rows log (`reward/<c>`), in row order."""
    seen: dict = {}
    for r in itertools.islice(run.eval_rows(), rows):
        seen.update((k.split("/", 1)[1], None) for k in r if k.startswith("reward/"))
    return list(seen)


def _values(values: list[float]) -> float | list[float]:
    distinct = sorted(set(values))
    return distinct[0] if len(distinct) == 1 else distinct


def what_ran(cells: list[Cell]) -> dict:
    """{"world": env.name (a list when cells differ), "reward": {scheme: {component:
    weight, or the sorted distinct weights where its runs differ}}, and "knobs":
    {format_penalty / world_model: weight} where some run sets one}."""
    runs = [r for c in cells for r in c.runs]
    worlds = sorted({str(r.config.get("env.name")) for r in runs})
    schemes: dict = {}
    for r in runs:
        schemes.setdefault(str(r.config.get("reward.name")), []).append(r)
    reward = {}
    for name, rs in sorted(schemes.items()):
        comps = dict.fromkeys(c for r in rs for c in components(r) if c not in KNOBS)
        comps.update(dict.fromkeys(k.rsplit(".", 1)[1] for r in rs for k in r.config
                                   if k.startswith("reward.weights.")))
        reward[name] = {c: _values([weight(r, c) for r in rs]) for c in comps}
    knobs = {c: _values([weight(r, c) for r in runs]) for c in KNOBS
             if any(weight(r, c) for r in runs)}
    return {"world": worlds[0] if len(worlds) == 1 else worlds, "reward": reward} | (
        {"knobs": knobs} if knobs else {})


def _num(v) -> str:
    if isinstance(v, list):
        return ", ".join(f"{x:g}" for x in v[:-1]) + f" or {v[-1]:g} by cell"
    return f"{v:g}"


def ran_words(summary: dict) -> str:
    """'world synthetic; reward naive (weights: correct 1, wrong 0, 1, 2 or 4 by cell)'
    ('' for a summary written before summary["ran"] existed)."""
    ran = summary.get("ran")
    if not ran:
        return ""
    world = ran["world"] if isinstance(ran["world"], str) else " / ".join(ran["world"])
    schemes = [f"{name} (weights: " + ", ".join(f"{c} {_num(w)}" for c, w in comps.items())
               + ")" if comps else name for name, comps in ran["reward"].items()
               if name != "None"]          # runs whose config names no reward.name
    knobs = [f"{c.replace('_', ' ')} {_num(w)}" for c, w in ran.get("knobs", {}).items()]
    return (f"world {world}" + (f"; reward {' / '.join(schemes)}" if schemes else "")
            + (f"; {', '.join(knobs)}" if knobs else ""))


def check_metric(metric: str, sweep: Sweep) -> None:
    """`--metric reward/<c>` only where every run weights c by 1 (its rows then hold the
    component itself); else one line naming the weights and the column to use."""
    if not metric.startswith("reward/"):
        return
    comp = metric.split("/", 1)[1]
    by_cell = {c.label: sorted({weight(r, comp) for r in c.runs}) for c in sweep.cells
               if c.runs}
    if all(ws == [1.0] for ws in by_cell.values()):
        return
    shown = "; ".join(f"{lab or 'the cell'}: {', '.join(f'{w:g}' for w in ws)}"
                      for lab, ws in by_cell.items())
    column = COLUMNS.get(comp, "<the eval.jsonl column that counts what it pays for>")
    raise AnalysisError(
        f"--metric {metric}: {weight_key(comp)} is not 1 in every run ({shown}), and the "
        f"rows hold the weighted component (weight x value), so weights, not behaviour, "
        f"would differ; compare the behaviour it pays for: --metric {column}")
