"""Find the runs under RUN_DIRs, read their configs and JSONL files, infer the factors
that differ between runs (seed excluded) and group the seeds of each cell."""
from __future__ import annotations

import itertools
import json
import math
import os
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from analysis import validate
from analysis.errors import AnalysisError  # noqa: F401  (re-exported)

REPO = Path(__file__).resolve().parents[1]


def shown(path) -> str:
    """A path as a report records it: relative to the repository when inside it, so that
    a report does not depend on where the checkout lives or the command ran."""
    try:
        return str(Path(path).resolve().relative_to(REPO))
    except ValueError:
        return str(path)


# Keys that never define a cell, named one by one (never by the shape of a name: a key
# ending in `path` or `dir` such as model.path or env.emails_path changes the result):
# bookkeeping groups (hydra, run: logging, device, wandb; paths), the preset's name, the
# seed, and the two cache locations (a cache holds results computed from the other keys).
EXCLUDED_PREFIXES = ("hydra", "run", "experiment", "paths", "seed")
EXCLUDED_KEYS = ("env.cache_dir", "env.judge.cache_dir", "judge.cache_dir")
# Keys a later ablate renamed, as ablate/loop/resume.py's RENAMED maps them for a resume
# (a prefix ends in "."): a run written before the rename (the judge at the top level)
# and one written after it (the email world's env.judge) are one cell. Copied, not
# imported: the analysis reads runs without importing ablate.
RENAMED = {"judge.": "env.judge.", "algo.curriculum.start_hops": "algo.curriculum.start_level"}


@dataclass
class Run:
    """One seed of one cell: a run directory."""
    path: Path
    config: dict                 # flattened config
    seed: object
    complete: bool
    config_file: Path
    _eval: list | None = None
    _greedy: list = field(default_factory=list)
    _metrics: list | None = None
    truncated: bool = False      # a run still writing: its half-written last line dropped
    allow_duplicates: bool = False   # repeated eval rows: keep the first (else an error)
    repeats: int = 0             # eval rows dropped as repeats (with allow_duplicates)
    renamed: tuple = ()          # RENAMED's old names its config held (read as the new)

    @property
    def eval_file(self) -> Path:
        return self.path / "eval.jsonl"

    @property
    def metrics_file(self) -> Path:
        return self.path / "metrics.jsonl"

    def eval_rows(self) -> list[dict]:
        """The sampled evaluation rows, the primary metric's (ablate/loop/eval_metrics.py); rows
        of the greedy pass (`decoding: greedy`) are in greedy_rows()."""
        if self._eval is None:
            rows, cut = read_jsonl(self.eval_file, required=("step", "task_id"),
                                   partial_tail=not self.complete)
            self.truncated |= cut
            validate.check_eval_rows(self.eval_file, rows)
            kept = validate.repeated_rows(self.eval_file, rows, self.allow_duplicates)
            kept = within_samples(self.eval_file, kept, self.config.get("eval.samples"),
                                  self.allow_duplicates)
            self.repeats, rows = len(rows) - len(kept), kept
            self._greedy = [r for r in rows if r.get("decoding") == "greedy"]
            # a greedy-only evaluation (eval.temperature=0) is the primary one
            self._eval = [r for r in rows if r.get("decoding") != "greedy"] or self._greedy
        return self._eval

    def greedy_rows(self) -> list[dict]:
        self.eval_rows()
        return self._greedy

    def metrics_rows(self) -> list[dict]:
        if self._metrics is None:
            self._metrics, cut = (read_jsonl(self.metrics_file, required=("step",),
                                             partial_tail=not self.complete)
                                  if self.metrics_file.exists() else ([], False))
            self.truncated |= cut
            validate.check_metrics_rows(self.metrics_file, self._metrics)
        return self._metrics


@dataclass
class Cell:
    factors: dict
    runs: list[Run] = field(default_factory=list)

    @property
    def label(self) -> str:
        return cell_label(self.factors)

    @property
    def seeds(self) -> tuple:
        return tuple(r.seed for r in self.runs)


@dataclass
class Sweep:
    cells: list[Cell]                   # analysed cells, sorted by factor values
    factors: list[str]                  # factor keys, in display order
    incomplete: list[dict]              # runs without COMPLETE (skipped unless included)
    failed: list[dict]                  # runs without a usable eval.jsonl
    missing: list[dict]                 # factor combinations of a full grid with no run
    duplicates: list[dict]              # same cell and seed found twice (first kept)
    levels: dict                        # factor -> sorted distinct values
    warnings: list = field(default_factory=list)   # mixed configs, missing seeds


def read_jsonl(path: Path, required: tuple = (),
               partial_tail: bool = False) -> tuple[list[dict], bool]:
    """Rows of a JSON Lines file, each with its line number in `_line`, and whether a
    half-written last line was dropped (only with partial_tail: a run still writing);
    errors name the file and line. The lines are parsed as one JSON array (one parser
    call), falling back to line by line to locate an error."""
    try:
        with open(path, encoding="utf-8") as fh:
            lines = [(n, line) for n, line in enumerate(fh, 1) if line.strip()]
    except UnicodeDecodeError as e:
        raise AnalysisError(f"{path}: not UTF-8 text ({e.reason})") from None
    except OSError as e:
        raise AnalysisError(f"{path}: cannot be read ({e.strerror})") from None
    cut = False
    try:
        rows = json.loads("[" + ",".join(line for _, line in lines) + "]")
        if len(rows) != len(lines):
            raise ValueError("a line holds more than one value")
    except ValueError:
        if partial_tail and lines and not lines[-1][1].endswith("\n"):
            try:
                json.loads(lines[-1][1])
            except ValueError:
                lines, cut = lines[:-1], True
        rows = [_parse_line(path, n, line) for n, line in lines]
    for (n, _), row in zip(lines, rows):
        if not isinstance(row, dict):
            raise AnalysisError(f"{path}: line {n} is not a JSON object")
        for key in required:
            if key not in row:
                raise AnalysisError(f"{path}: line {n} has no '{key}' field")
        row["_line"] = n
    return rows, cut


def _parse_line(path: Path, n: int, line: str):
    try:
        return json.loads(line)
    except json.JSONDecodeError as e:
        raise AnalysisError(f"{path}: line {n} is not valid JSON ({e.msg})") from None


def within_samples(path: Path, rows: list[dict], samples, allow: bool = False) -> list[dict]:
    """The rows whose `sample` is one of the run's own eval.samples (0 to k-1 for each
    question): a row past it (the evaluation appended twice, the copy renumbered, which
    the repeat key lets through) is an error naming FILE:LINE, unless `allow`
    (--allow-duplicates), which leaves it out. A run without eval.samples or rows
    without `sample` are not checked."""
    if not validate.is_int(samples):
        return rows
    kept = []
    for r in rows:
        s = r.get("sample")
        if not validate.is_int(s) or 0 <= s < samples:
            kept.append(r)
        elif not allow:
            raise AnalysisError(
                f"{path}:{r.get('_line', '?')}: sample {s} of task {r['task_id']!r} at "
                f"step {r['step']} is past this run's eval.samples = {samples} (samples "
                f"0-{samples - 1}; its evaluation appended twice?): remove the extra rows, "
                "or --allow-duplicates leaves them out")
    return kept


def renamed(cfg: dict) -> tuple[dict, tuple]:
    """A flattened config under today's names (RENAMED), and the old names it held. A
    key held under both names keeps the new one's value."""
    out, old = {}, []
    for key, value in cfg.items():
        for was, now in RENAMED.items():
            if key == was or (was.endswith(".") and key.startswith(was)):
                old.append(was)
                new = now + key[len(was):]
                if new not in cfg:
                    out[new] = value
                break
        else:
            out[key] = value
    return out, tuple(dict.fromkeys(old))


def rename_warnings(runs: list[Run]) -> list[str]:
    """A rename that splits the runs (some written before it, some after): named among
    the keys that are not factors. A sweep written wholly before it says nothing."""
    out = []
    for was, now in RENAMED.items():
        old = [r for r in runs if was in r.renamed]
        new = [r for r in runs if was not in r.renamed and any(
            k == now or (now.endswith(".") and k.startswith(now)) for k in r.config)]
        if old and new:
            star = "*" if was.endswith(".") else ""
            out.append(f"{len(old)} run(s) written before {was}{star} became {now}{star} "
                       f"(first: {shown(old[0].config_file)}) read under the new name, as "
                       "ablate/loop/resume.py resumes them; the rename is not treated as a "
                       "factor")
    return out


def read_config(path: Path) -> dict:
    try:
        with open(path, encoding="utf-8") as fh:
            cfg = yaml.safe_load(fh)
    except yaml.YAMLError as e:
        raise AnalysisError(f"{path}: not valid YAML ({e})") from None
    except (OSError, UnicodeDecodeError) as e:
        raise AnalysisError(f"{path}: cannot be read ({e})") from None
    if not isinstance(cfg, dict):
        raise AnalysisError(f"{path}: expected a mapping at the top level")
    return cfg


def flatten(cfg: dict, prefix: str = "") -> dict:
    out = {}
    for k, v in cfg.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict) and v:
            out.update(flatten(v, key + "."))
        elif isinstance(v, (list, tuple)):
            out[key] = json.dumps(v, sort_keys=True)
        elif isinstance(v, dict):
            out[key] = "{}"
        else:
            out[key] = v
    return out


def _excluded(key: str) -> bool:
    return key.split(".")[0] in EXCLUDED_PREFIXES or key in EXCLUDED_KEYS


def find_run_dirs(root: Path) -> list[tuple[Path, Path]]:
    """(run dir, config file) for every run at any depth below root. A run has
    config.yaml + eval.jsonl, or Hydra's .hydra/config.yaml (prefer the resolved
    config.yaml when both exist). Run directories are not searched further."""
    root = Path(root)
    if not root.exists():
        raise AnalysisError(f"{root}: no such directory")
    found = []
    for dirpath, dirnames, filenames in os.walk(root):
        d = Path(dirpath)
        hydra_cfg = d / ".hydra" / "config.yaml"
        if "config.yaml" in filenames and ("eval.jsonl" in filenames or hydra_cfg.exists()):
            found.append((d, d / "config.yaml"))
            dirnames[:] = []
        elif hydra_cfg.exists():
            found.append((d, hydra_cfg))
            dirnames[:] = []
        else:
            dirnames[:] = sorted(n for n in dirnames if n != ".hydra")
    return found


def sort_key(v):
    if v is None:
        return (0, 0, "")
    if isinstance(v, bool):
        return (1, int(v), "")
    if isinstance(v, (int, float)):
        return (2, float(v), "")
    return (3, 0, str(v))


def added_keys(configs: list[dict]) -> list[str]:
    """Keys absent from fewer of their peers (`_peers`) than hold them, with one value in
    all that do: a setting that a newer ablate writes (with its default) and an older one
    did not, the runs without it the odd ones out. Not a factor (runs of one cell started
    before and after an upgrade stay one cell); named in a warning. A key held by as many
    runs as lack it or fewer (one cell's `+env.x=5`) is a setting of those runs: a
    factor, as a differing value is."""
    keys = sorted(set().union(*configs)) if configs else []
    out = []
    for k in keys:
        peers = _peers(k, configs)
        have = [c[k] for c in peers if k in c]
        if len(peers) - len(have) < len(have) < len(peers) and len(
                {json.dumps(v, sort_keys=True, default=str) for v in have}) == 1:
            out.append(k)
    return out


def _peers(key: str, configs: list[dict]) -> list[dict]:
    """The runs that could hold `key`: those of a group choice (reward.name) that a run
    holding it made (the shaped reward's weights are not missing from outcome runs)."""
    group = key.split(".")[0] + ".name"
    if group == key:
        return configs
    names = {json.dumps(c.get(group), default=str) for c in configs if key in c}
    return [c for c in configs if json.dumps(c.get(group), default=str) in names]


def _of_the_group_choice(key: str, configs: list[dict]) -> bool:
    """True when `key` (e.g. reward.weights.witness) is present exactly in the runs whose
    group `name` (reward.name) has certain values: a setting of that choice (the shaped
    reward's weights), not one an older ablate did not write."""
    group = key.split(".")[0] + ".name"
    if group == key:
        return False
    present: dict = {}
    for c in configs:
        present.setdefault(json.dumps(c.get(group), default=str), set()).add(key in c)
    return len(present) > 1 and all(len(v) == 1 for v in present.values())


def newer_keys(runs: list[Run]) -> list[str]:
    """Keys that every run recording its code (code.json: ablate/loop/cell.py's
    record_code, written by a newer ablate) holds with one value and no run without one
    holds: settings a newer ablate writes with its default, which the older runs ran
    without. Not factors (a seed added today to a committed grid is of its cell); named in
    a warning. Empty unless a sweep mixes the two."""
    new = [r for r in runs if (r.path / "code.json").exists()]
    old = [r for r in runs if not (r.path / "code.json").exists()]
    if not new or not old:
        return []
    keys = set.intersection(*(set(r.config) for r in new)) - set().union(
        *(r.config for r in old))
    return sorted(k for k in keys if not _excluded(k) and len(
        {json.dumps(r.config[k], sort_keys=True, default=str) for r in new}) == 1)


def infer_factors(configs: list[dict], newer: list[str] = ()) -> list[str]:
    """Keys whose values differ between runs, seed and bookkeeping excluded (and the keys
    only a newer ablate writes, `newer`). When a group's `name` differs, the name is the
    factor, and the group's other differing keys are kept only if they vary among runs
    with the same name."""
    keys = sorted(set().union(*configs)) if configs else []
    added = set(added_keys(configs)) | set(newer)
    differing = [k for k in keys if not _excluded(k) and k not in added
                 and len({json.dumps(c.get(k), sort_keys=True, default=str)
                          for c in configs}) > 1]
    named_groups = {k.split(".")[0] for k in differing
                    if k.count(".") == 1 and k.endswith(".name")}
    factors = []
    for k in differing:
        group = k.split(".")[0]
        if group in named_groups and k != f"{group}.name":
            by_name: dict = {}
            for c in configs:
                by_name.setdefault(c.get(f"{group}.name"), set()).add(
                    json.dumps(c.get(k), sort_keys=True, default=str))
            if not any(len(v) > 1 for v in by_name.values()):
                continue
        factors.append(k)
    # group names first, then the rest, each alphabetical
    return sorted(factors, key=lambda k: (not k.endswith(".name"), k))


def cell_label(factors: dict) -> str:
    if not factors:
        return "all"
    return ", ".join(f"{k.removesuffix('.name')}={_fmt(v)}" for k, v in factors.items())


def _fmt(v) -> str:
    if isinstance(v, float):
        return f"{v:g}"
    return str(v)


def collect(run_dirs: list, include_incomplete: bool = False,
            allow_duplicates: bool = False) -> Sweep:
    found = []
    for root in run_dirs:
        found.extend(find_run_dirs(Path(root)))
    if not found:
        raise AnalysisError("no runs found under " + ", ".join(map(str, run_dirs))
                            + " (looked for .hydra/config.yaml or config.yaml + eval.jsonl)")
    seen, runs = set(), []
    for d, cfg_file in found:
        if d.resolve() in seen:
            continue
        seen.add(d.resolve())
        cfg, old = renamed(flatten(read_config(cfg_file)))
        runs.append(Run(path=d, config=cfg, seed=cfg.get("seed"),
                        complete=(d / "COMPLETE").exists(), config_file=cfg_file,
                        allow_duplicates=allow_duplicates, renamed=old))
    newer = newer_keys(runs)
    factors = infer_factors([r.config for r in runs], newer)
    warnings = (config_warnings(runs, newer) + rename_warnings(runs)
                + partial_factor_warnings(runs, factors))

    incomplete, failed, duplicates = [], [], []
    cells: dict[tuple, Cell] = {}
    for r in sorted(runs, key=lambda r: str(r.path)):
        fac = {k: r.config.get(k) for k in factors}
        info = {"path": shown(r.path), "factors": fac, "seed": r.seed}
        if not r.complete:
            incomplete.append(info)
            if not include_incomplete:
                continue
        if not r.eval_file.exists():
            failed.append({**info, "reason": "no eval.jsonl"})
            continue
        if not r.eval_rows():
            failed.append({**info, "reason": "eval.jsonl is empty"})
            continue
        if r.truncated:
            warnings.append(f"{shown(r.eval_file)}: still being written; its incomplete "
                            "last line is left out")
        if r.repeats:
            warnings.append(f"{shown(r.eval_file)}: {r.repeats} repeated row(s) left out "
                            "(--allow-duplicates: the first of each is kept)")
        key = tuple(json.dumps(fac[k], sort_keys=True, default=str) for k in factors)
        cell = cells.setdefault(key, Cell(factors=fac))
        first = next((x for x in cell.runs if x.seed == r.seed), None)
        if first is not None:
            same = _rows_key(first) == _rows_key(r)
            duplicates.append({**info, "first": shown(first.path), "identical_rows": same})
            rows = "identical rows" if same else "different rows"
            warnings.append(f"{shown(r.path)}: the same cell and seed {r.seed} as "
                            f"{shown(first.path)} ({rows}); the first is analysed, this "
                            "one is listed under duplicates")
            continue
        cell.runs.append(r)
    ordered = sorted(cells.values(), key=lambda c: [sort_key(c.factors[k]) for k in factors])
    for c in ordered:
        c.runs.sort(key=lambda r: sort_key(r.seed))

    levels = {k: sorted({json.dumps(r.config.get(k), default=str) for r in runs})
              for k in factors}
    levels = {k: sorted((json.loads(v) for v in vs), key=sort_key) for k, vs in levels.items()}
    present = {tuple(json.dumps(c.factors[k], default=str) for k in factors) for c in ordered}
    observed = {tuple(json.dumps(r.config.get(k), default=str) for k in factors) for r in runs}
    missing = []
    if factors and math.prod(len(v) for v in levels.values()) <= 10_000:
        for combo in itertools.product(*(levels[k] for k in factors)):
            key = tuple(json.dumps(v, default=str) for v in combo)
            if key not in present:
                missing.append({"factors": dict(zip(factors, combo)),
                                "reason": "incomplete/failed" if key in observed
                                else "no run in the grid"})
    return Sweep(cells=ordered, factors=factors, incomplete=incomplete, failed=failed,
                 missing=missing, duplicates=duplicates, levels=levels, warnings=warnings)


def _rows_key(run: Run) -> str:
    """The run's evaluation rows without line numbers, as one comparable string."""
    return json.dumps([{k: v for k, v in r.items() if k != "_line"} for r in run.eval_rows()],
                      sort_keys=True, default=str)


def config_warnings(runs: list[Run], newer: list[str] = ()) -> list[str]:
    """Runs without a seed, runs from different experiment presets mixed in one analysis
    (each named by its config file), and keys older runs lack (not factors)."""
    out = [f"{shown(r.config_file)}: no top-level 'seed'; its seeds cannot be told apart"
           for r in runs if r.seed is None]
    by_exp: dict = {}
    for r in runs:
        exp = r.config.get("experiment.name", r.config.get("experiment"))
        by_exp.setdefault(json.dumps(exp, default=str), shown(r.config_file))
    if len(by_exp) > 1:
        out.append("runs of different experiments are mixed: " + "; ".join(
            f"{json.loads(k)} ({f})" for k, f in by_exp.items()))
    configs = [r.config for r in runs]
    added = [k for k in added_keys(configs) if k not in newer
             and not _excluded(k) and not _of_the_group_choice(k, configs)]
    if added:
        lacking = {id(c) for k in added for c in _peers(k, configs) if k not in c}
        n = len(lacking)
        out.append(f"{n} run(s) lack keys the others set to one value (an older ablate "
                   f"wrote them?); not treated as factors: " + ", ".join(added))
    if newer:
        lacking = sum(not (r.path / "code.json").exists() for r in runs)
        out.append(f"{lacking} run(s) without code.json (an older ablate) lack keys every "
                   "run with one sets to one value (a newer ablate's settings); not treated "
                   "as factors: " + ", ".join(newer))
    return out


def partial_factor_warnings(runs: list[Run], factors: list[str]) -> list[str]:
    """Factors that some runs do not set at all (one cell's added key): the runs that
    set it are named, as they form cells of their own."""
    configs = [r.config for r in runs]
    out = []
    for k in factors:
        have = [r for r in runs if k in r.config]
        if len(have) < len(runs) and not _of_the_group_choice(k, configs):
            first = shown(have[0].config_file)
            out.append(f"{k} is set in {len(have)} run(s) (first: {first}) and absent from "
                       f"{len(runs) - len(have)}: a factor, as a differing value is "
                       "(absent = None)")
    return out


def parse_assignments(text: str) -> dict:
    """'reward=shaped,algo=dapo' -> {'reward': 'shaped', 'algo': 'dapo'} (YAML-typed)."""
    out = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        if "=" not in part:
            raise AnalysisError(f"--baseline: '{part}' is not KEY=VALUE")
        k, v = part.split("=", 1)
        out[k.strip()] = yaml.safe_load(v.strip())
    return out


def _number(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def _typed(text: str):
    """A string as YAML types it (`1e-3`, which PyYAML leaves a string, as a float)."""
    try:
        value = yaml.safe_load(text)
    except yaml.YAMLError:
        return text
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            return value
    return value


def same_value(have, want) -> bool:
    """Whether a config value `have` (config.yaml's, typed) is the value `want` a
    --baseline or analysis.yaml names: numbers numerically (1 == 1.0, 1e-3 == 0.001),
    booleans as booleans (true == True, never 1), lists item by item, None as null, and
    strings as strings. A string on one side only is read as YAML types it first."""
    if isinstance(have, (list, tuple)) and isinstance(want, (list, tuple)):
        return len(have) == len(want) and all(map(same_value, have, want))
    if isinstance(have, str) != isinstance(want, str):
        have, want = (_typed(x) if isinstance(x, str) else x for x in (have, want))
    if isinstance(have, bool) or isinstance(want, bool):
        return isinstance(have, bool) and isinstance(want, bool) and have == want
    if _number(have) and _number(want):
        return have == want or (math.isnan(have) and math.isnan(want))
    if isinstance(have, str) and isinstance(want, str):
        return have == want
    return str(have) == str(want)     # None as null (or as written: None)


def match_cell(cells: list[Cell], spec: dict) -> int:
    """Index of the one cell whose factors match spec (a key may omit '.name'), each value
    compared as the config types it (same_value: 1 matches a stored 1.0)."""
    def value_of(c, k):
        if k in c.factors:
            return True, c.factors[k]
        if f"{k}.name" in c.factors:
            return True, c.factors[f"{k}.name"]
        cfg = c.runs[0].config if c.runs else {}      # a key constant over the sweep
        for key in (k, f"{k}.name"):
            if key in cfg:
                return True, cfg[key]
        return False, None

    hits = []
    for i, c in enumerate(cells):
        ok = True
        for k, v in spec.items():
            has, val = value_of(c, k)
            if not has or not same_value(val, v):
                ok = False
                break
        if ok:
            hits.append(i)
    if len(hits) != 1:
        labels = "; ".join(c.label for c in cells)
        what = "no cell" if not hits else f"{len(hits)} cells"
        raise AnalysisError(f"--baseline {spec}: matches {what}; cells are: {labels}")
    return hits[0]
