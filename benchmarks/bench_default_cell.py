"""The default cell (`python -m ablate`), the engine before issue 31 against today's,
paired A B A B in one process, in machine-speed units.

    python benchmarks/bench_default_cell.py [--pairs 2] [--out FILE] [-- overrides...]

Engines (ablate/loop/policy.py, ablate/samplers/hf.py):
  old: `policy.MERGED_EVAL = False` (each evaluation's greedy episodes in a second
       rollout) and the HF sampler's `legacy = True` (each prefill row encoded into its
       own buffers, then copied into the decoding batch's);
  new: as shipped (cascade attention: ablate/samplers/cascade.py; run.num_threads=auto:
       ablate/core/threads.py; run.malloc_reuse: ablate/core/memory.py); old runs on one
       thread with glibc's default settings.
Each run is `run_cell` on the composed default config into its own directory; the
machine-speed unit (benchmarks/machine_unit.py) is measured before and after it (one
measurement between two runs serves as the first's "after" and the second's "before"), and
wall seconds, the process's CPU seconds and units are reported per run, with medians,
new/old ratios (of the medians and per pair) and the load average seen. Rows: the first
old and first new cells are compared row for row (benchmarks/compare_cells.py: all 192
evaluation rows and the metrics rows apart from timing), and every later run of an
engine with its first one.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import compare_cells  # noqa: E402
import machine_unit  # noqa: E402

ENGINES = ("old", "new")


def run(engine: str, overrides: list[str], out: Path) -> tuple[float, float]:
    import ablate.loop.policy as pol
    import ablate.samplers as samplers
    from ablate.apps.cli import compose_config
    from ablate.core.memory import reuse_freed_memory
    from ablate.loop.cell import run_cell

    original = samplers.make_sampler

    def make(*a, **kw):
        s = original(*a, **kw)
        s.legacy = engine == "old"
        return s

    samplers.make_sampler, pol.MERGED_EVAL = make, engine == "new"
    try:
        # the old engine's run.num_threads was 1 and glibc kept its defaults; the new
        # one's defaults are auto and run.malloc_reuse (process-wide: undone for old runs)
        old = ["run.num_threads=1", "run.malloc_reuse=false"] if engine == "old" else []
        reuse_freed_memory(engine == "new")
        cfg = compose_config(old + overrides + ["run.quiet=true"])
        t0, c0 = time.perf_counter(), time.process_time()
        run_cell(cfg, out)
        return time.perf_counter() - t0, time.process_time() - c0
    finally:
        samplers.make_sampler, pol.MERGED_EVAL = original, True


def same_rows(a: Path, b: Path) -> dict:
    out = {name: compare_cells.compare(compare_cells.rows(a / name),
                                       compare_cells.rows(b / name), 0.0)
           for name in ("eval.jsonl", "metrics.jsonl")}
    out["identical"] = all(r["rows"][0] == r["rows"][1] and not r["differing"]
                           for r in out.values())
    return out


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser()
    ap.add_argument("--pairs", type=int, default=2)
    ap.add_argument("--out", default=None)
    ap.add_argument("overrides", nargs="*")
    a = ap.parse_args(argv)
    from ablate.apps.cli import compose_config
    from ablate.envs.email.bundle import build_env
    build_env(compose_config(a.overrides))          # warm: mailbox, tasks, FTS5 index
    work = Path(tempfile.mkdtemp(prefix="bench-default-cell-"))
    unit_model = machine_unit._model()
    runs, first, loads = [], {}, []
    after = machine_unit.measure(unit_model)
    for i in range(2 * a.pairs):
        engine = ENGINES[i % 2]
        out = work / f"{engine}-{i}"
        before = after            # one measurement between two runs serves both
        loads.append(os.getloadavg()[0])
        wall, cpu = run(engine, a.overrides, out)
        loads.append(os.getloadavg()[0])
        after = machine_unit.measure(unit_model)
        r = {"engine": engine, "dir": str(out), "wall_s": round(wall, 1),
             "cpu_s": round(cpu, 1), "unit_before_s": round(before, 2),
             "unit_after_s": round(after, 2),
             "units": round(machine_unit.in_units(wall, before, after), 3)}
        if engine in first:
            r["rows_identical_to_first_run"] = same_rows(first[engine], out)["identical"]
        first.setdefault(engine, out)
        runs.append(r)
        print(json.dumps(r), flush=True)
    report = _report(a, runs, same_rows(first["old"], first["new"]), loads)
    print(json.dumps(report, indent=1, default=str))
    if a.out:
        Path(a.out).write_text(json.dumps(report, indent=1, default=str) + "\n")
    return report


def _report(a, runs, rows, loads) -> dict:
    med = {e: {k: statistics.median(r[k] for r in runs if r["engine"] == e)
               for k in ("wall_s", "cpu_s", "units")} for e in ENGINES}
    pairs = list(zip(runs[::2], runs[1::2]))
    return {"overrides": a.overrides, "pairs": a.pairs, "runs": runs, "median": med,
            "ratio_new_over_old": {k: round(med["new"][k] / med["old"][k], 3)
                                   for k in ("wall_s", "cpu_s", "units")},
            "ratio_new_over_old_per_pair": {
                k: [round(n[k] / o[k], 3) for o, n in pairs] for k in ("wall_s", "cpu_s")},
            "load_average_1min_seen": [min(loads), max(loads)],
            "rows_new_vs_old": rows}


if __name__ == "__main__":
    main()
