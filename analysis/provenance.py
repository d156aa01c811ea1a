"""The code each arm ran: every run's code.json (written by ablate.loop.cell.record_code:
git commit, a dirty flag with a hash of the uncommitted changes, ablate's and the key
packages' versions), listed per arm, with a warning that names the versions when one arm
mixes them or when the arms an analysis compares ran on different code."""
from __future__ import annotations

import json

from analysis.collect import shown

KEY = ("commit", "dirty", "diff_sha256")


def read(run) -> list[dict] | None:
    """The code records of a run (its first start, then each resume on other code), or
    None when the run has no code.json (runs from before ablate wrote it)."""
    path = run.path / "code.json"
    if not path.exists():
        return None
    try:
        rec = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(rec, dict):
        return None
    return [{k: v for k, v in rec.items() if k != "resumed_with"},
            *[r for r in rec.get("resumed_with", []) if isinstance(r, dict)]]


def name(v: dict) -> str:
    """'a6eb055177' / 'a6eb055177 + changes a0e7a1bd' / 'no git (ablate 0.1.0)'."""
    if not v.get("commit"):
        return f"no git commit (ablate {v.get('ablate')})"
    text = str(v["commit"])[:10]
    if v.get("dirty"):
        text += f" + uncommitted changes {str(v.get('diff_sha256') or '')[:8]}".rstrip()
    return text


def _key(v: dict) -> str:
    return json.dumps([v.get(k) for k in KEY] if v.get("commit") else
                      [None, v.get("ablate"), v.get("packages")], sort_keys=True, default=str)


def code_versions(cells) -> tuple[list[dict], list[str]]:
    """Per arm: its distinct code versions with the seeds that ran each (and the seeds
    without a record); and the warnings (an arm that mixes versions; arms on different
    versions, each named)."""
    out, warnings = [], []
    for c in cells:
        versions: dict = {}
        unrecorded = []
        for r in c.runs:
            recs = read(r)
            if recs is None:
                unrecorded.append(r.seed)
                continue
            for v in recs:
                entry = versions.setdefault(_key(v), {**{k: v.get(k) for k in KEY},
                                                      "ablate": v.get("ablate"),
                                                      "packages": v.get("packages") or {},
                                                      "seeds": []})
                if r.seed not in entry["seeds"]:
                    entry["seeds"].append(r.seed)
        row = {"label": c.label, "versions": list(versions.values()),
               "not_recorded": unrecorded}
        out.append(row)
        mixed = [r for r in c.runs if (read(r) or []) and len({_key(v) for v in read(r)}) > 1]
        if len(versions) > 1 or mixed:
            warnings.append(f"{c.label}: its runs ran on {len(versions)} code versions ("
                            + "; ".join(f"{name(v)}: seed(s) {', '.join(map(str, v['seeds']))}"
                                        for v in versions.values()) + ")"
                            + ("; resumed on other code: " + ", ".join(shown(r.path)
                                                                       for r in mixed)
                               if mixed else ""))
    known = [row for row in out if row["versions"]]
    distinct = {_key(v) for row in known for v in row["versions"]}
    if len(known) > 1 and len(distinct) > 1:
        warnings.append("the arms compared ran on different code: " + "; ".join(
            f"{row['label']}: " + ", ".join(name(v) for v in row["versions"])
            for row in known) + " (a difference between them may be the code's)")
    return out, warnings
