"""Pre-registered hypotheses over a summary's comparisons, each with a stated joining rule.

A hypothesis names one or more comparisons (its parts) and the direction each predicts;
`join` says how the parts make one verdict:

    all   every part must hold: an intersection-union test (Berger 1982, Technometrics
          24:295; Berger & Hsu 1996, Stat. Sci. 11:283): the joint null is the union of
          the parts' nulls, rejected at level alpha when every part is rejected at alpha
          in its predicted direction; p = the largest part p. No adjustment within.
    any   at least one part must hold: a union-intersection test with Bonferroni's bound,
          p = k * (smallest part p in the predicted direction), capped at 1.

A one-part hypothesis is `all` with k = 1. The hypotheses listed form one family:
their joint p-values are Holm-adjusted (Holm 1979) across it. The same is done with the
exact permutation p where every part has one. Directions use the two-sided test of each
part and its sign (a directional decision; Shaffer 1972).

analysis.yaml:

    hypotheses:
      - name: H1
        join: all
        parts:
          - {cell: {reward.name: shaped}, expect: greater}     # vs the baseline
          - {cell: {reward.name: outcome}, vs: {reward.name: shaped}, expect: less}
"""
from __future__ import annotations

from analysis.errors import AnalysisError
from analysis.stats import holm

JOINS = ("all", "any")
EXPECT = {"greater": 1, "less": -1}


def _matches(values: dict, wanted: dict) -> bool:
    return all(str(values.get(k)) == str(v) for k, v in wanted.items())


def _find(part: dict, comparisons: list[dict], baseline: dict, where: str) -> tuple:
    """(comparison, sign): sign -1 when the comparison is stored the other way round."""
    a, b = part["cell"], part.get("vs") or baseline
    found = [(c, 1) for c in comparisons if _matches(c["a"], a) and _matches(c["b"], b)]
    found += [(c, -1) for c in comparisons if _matches(c["a"], b) and _matches(c["b"], a)]
    if len(found) != 1:
        have = "; ".join(f"{c['label']} vs {c['vs']}" for c in comparisons) or "none"
        what = "no comparison" if not found else f"{len(found)} comparisons"
        raise AnalysisError(f"{where}: {what} of {a} vs {b} in this analysis (those it "
                            f"has: {have}); set all_pairs: true for pairs without the "
                            "baseline")
    return found[0]


def _check(spec, where: str) -> list[dict]:
    if not isinstance(spec, list):
        raise AnalysisError(f"{where}: hypotheses must be a list of "
                            "{name, join, parts} mappings")
    for i, h in enumerate(spec):
        w = f"{where}: hypotheses[{i}]"
        if not isinstance(h, dict) or not h.get("name") or not h.get("parts"):
            raise AnalysisError(f"{w}: needs a name and a non-empty list of parts")
        if h.get("join", "all") not in JOINS:
            raise AnalysisError(f"{w}.join is {h.get('join')!r}; allowed: {', '.join(JOINS)}")
        for j, p in enumerate(h["parts"]):
            if not isinstance(p, dict) or not isinstance(p.get("cell"), dict):
                raise AnalysisError(f"{w}.parts[{j}]: needs cell: {{key: value}}")
            if p.get("expect") not in EXPECT:
                raise AnalysisError(f"{w}.parts[{j}].expect is {p.get('expect')!r}; "
                                    f"allowed: {', '.join(EXPECT)}")
    return spec


def _oriented(c: dict, sign: int) -> dict:
    """A comparison's row read as `cell` minus `vs` (sign -1: stored the other way)."""
    return {"label": c["label"] if sign > 0 else c["vs"],
            "vs": c["vs"] if sign > 0 else c["label"],
            "a": c["a"] if sign > 0 else c["b"], "b": c["b"] if sign > 0 else c["a"],
            "delta": None if c["delta"] is None else sign * c["delta"],
            "ci": None if c["ci"] is None else sorted(sign * x for x in c["ci"]),
            "p": c["p"], "p_perm": c.get("p_perm")}


def _part(p: dict, comparisons, baseline, where: str) -> dict:
    row = _oriented(*_find(p, comparisons, baseline, where))
    right = row["delta"] is not None and row["delta"] * EXPECT[p["expect"]] > 0
    return {**row, "expect": p["expect"], "direction_ok": right}


def joint_p(parts: list[dict], join: str, key: str = "p") -> float | None:
    """The hypothesis' p from its parts' two-sided p-values (module docstring)."""
    ps = [q[key] for q in parts]
    if any(v is None for v in ps):
        return None
    if join == "all":   # intersection-union: every part significant in its direction
        return 1.0 if not all(q["direction_ok"] for q in parts) else float(max(ps))
    ok = [v for q, v in zip(parts, ps) if q["direction_ok"]]   # union-intersection
    return 1.0 if not ok else float(min(1.0, len(ps) * min(ok)))


DECIDE_BY = {"t": "p", "permutation": "p_perm"}   # analysis.yaml `decide_by`
DECIDE_WORDS = {"t": "t", "permutation": "exact permutation"}


def evaluate(spec, summary: dict, where: str, alpha: float | None = None,
             decide_by: str = "t", trend: dict | None = None) -> list[dict]:
    """Each hypothesis with its parts, joint p (t and permutation), the Holm-adjusted p
    across the family (the listed hypotheses and the `trend` test, when analysis.yaml
    has one) and "supported" / "not supported", decided by the pre-registered p
    (`decide_by`: t or permutation; `p_decision`, the one p every output quotes)."""
    if decide_by not in DECIDE_BY:
        raise AnalysisError(f"{where}: decide_by is {decide_by!r}; allowed: "
                            + ", ".join(DECIDE_BY))
    if not spec and not trend:
        return []
    alpha = summary["alpha"] if alpha is None else alpha
    out = []
    for i, h in enumerate(_check(spec or [], where)):
        join = h.get("join", "all")
        parts = [_part(p, summary["comparisons"], summary["baseline"] or {},
                       f"{where}: hypotheses[{i}].parts[{j}]")
                 for j, p in enumerate(h["parts"])]
        out.append({"name": str(h["name"]), "join": join, "parts": parts,
                    "p": joint_p(parts, join), "p_perm": joint_p(parts, join, "p_perm")})
    family = ([trend] if trend else []) + out
    names = [f["name"] for f in family]
    for key in ("p", "p_perm"):
        tested = [f for f in family if f[key] is not None]
        for f, pa in zip(tested, holm([f[key] for f in tested])):
            f[f"{key}_holm"] = float(pa)
    for f in family:
        f.setdefault("p_holm", None)
        f.setdefault("p_perm_holm", None)
        f["decided_by"] = decide_by
        f["family"] = names
        f["p_decision"] = f[DECIDE_BY[decide_by] + "_holm"]
    for h in out:
        h["verdict"] = (None if h["p_decision"] is None else
                        "supported" if h["p_decision"] < alpha else "not supported")
    if trend:
        trend["verdict"] = ("supported" if trend["p_decision"] is not None
                            and trend["p_decision"] < alpha
                            and trend["direction"] == trend["expect"] else "not supported")
        trend["supported"] = trend["verdict"] == "supported"
    return out


def decision_words(h: dict) -> str:
    """'exact permutation p, Holm over T, H1' (how the p every output quotes was made)."""
    fam = h.get("family") or [h["name"]]
    test = f"{DECIDE_WORDS[h.get('decided_by', 't')]} p"
    return (f"{test}, Holm over {', '.join(fam)}" if len(fam) > 1
            else f"{test}, a family of one (no adjustment)")


def primary(spec, summary: dict, where: str) -> list[dict]:
    """The pre-registered primary comparison(s) (analysis.yaml `primary:`), each as the
    row its table holds: a hypothesis name (its parts, with the hypothesis' Holm p, as in
    the hypotheses table), {cell: {...}, vs: {...}} (a comparison, with its adjusted
    p, as in the comparisons table; vs defaults to the baseline) or {change: {...}} (a
    cell's paired change from its first evaluation, as in the report's change table). The finding figure draws
    these numbers (analysis.figures.finding)."""
    if spec is None:
        return []
    items = spec if isinstance(spec, list) else [spec]
    hyps = {h["name"]: h for h in summary.get("hypotheses") or []}
    out = []
    for i, item in enumerate(items):
        w = f"{where}: primary" + (f"[{i}]" if isinstance(spec, list) else "")
        if isinstance(item, str):
            if item not in hyps:
                raise AnalysisError(f"{w} is {item!r}, which names no hypothesis; allowed: "
                                    + (", ".join(hyps) or "none (no hypotheses: give "
                                       "{cell: {key: value}})"))
            h = hyps[item]
            out += [{**part, "source": item, "p_adj": h["p_decision"],
                     "p_adj_words": decision_words(h), "verdict": h["verdict"]}
                    for part in h["parts"]]
            continue
        if not isinstance(item, dict) or not (isinstance(item.get("cell"), dict)
                                              or isinstance(item.get("change"), dict)):
            raise AnalysisError(f"{w}: expected a hypothesis name, {{cell: {{key: value}}}} "
                                f"or {{change: {{key: value}}}}, got {item!r}")
        try:
            out.append(_change_part(item["change"], summary, w) if "change" in item
                       else _comparison_part(item, summary, w))
        except AnalysisError as e:   # runs without that arm (a subset, an interim look)
            summary.setdefault("warnings", []).append(
                f"{e}: the finding figure leaves this primary comparison out")
    return out


def _comparison_part(item: dict, summary: dict, where: str) -> dict:
    c, sign = _find(item, summary["comparisons"], summary["baseline"] or {}, where)
    return {**_oriented(c, sign), "source": "comparison", "p_adj": c.get("p_quoted"),
            "p_adj_words": c.get("p_quoted_words"), "verdict": c.get("verdict")}


def _change_part(factors: dict, summary: dict, where: str) -> dict:
    """A cell's change of the metric from its first evaluation (its paired test)."""
    cells = [c for c in summary["cells"] if _matches(c["factors"], factors)]
    if len(cells) != 1:
        have = "; ".join(c["label"] for c in summary["cells"])
        raise AnalysisError(f"{where}: change: {factors} matches {len(cells)} cells (the "
                            f"cells: {have})")
    c = cells[0]
    ch = (c.get("change") or {}).get(summary["metric"])
    if not ch:
        raise AnalysisError(f"{where}: change: cell {c['label']} has one evaluation step, "
                            "no change")
    return {"label": c["label"], "vs": f"step {'/'.join(map(str, ch['from_step']))}",
            "a": c["factors"], "b": c["factors"], "kind": "change",
            "delta": ch["mean"], "ci": ch["ci"], "p": ch.get("p"), "p_perm": None,
            "source": "change", "p_adj": None, "p_adj_words": None, "verdict": None}


def quote(summary: dict) -> None:
    """Give every comparison the one p its outputs quote (`p_quoted`, with
    `p_quoted_words`) and the verdict that p gives: a comparison that is the only part of
    a pre-registered hypothesis is quoted with the hypothesis' decision p (its family,
    its test); every other with its own family's adjusted p. The headline table, the
    report, the finding figure and the README templates read these fields only (issue
    65: one comparison had three different Holm p in one README)."""
    from analysis.stats import verdict
    own = {"holm": "Holm", "bh": "Benjamini-Hochberg"}
    fams = {}
    for c in summary["comparisons"]:
        fams[c["family"]] = fams.get(c["family"], 0) + (c.get("p_adj") is not None)
    for c in summary["comparisons"]:
        c["p_quoted"] = c.get("p_adj")
        c["p_quoted_words"] = (f"t p, {own.get(c.get('correction'), 'Holm')} over the "
                               f"{fams[c['family']]} {c['family'].replace('_', ' ')} "
                               "comparisons" if c.get("p_adj") is not None else None)
    for h in summary.get("hypotheses") or []:
        if len(h["parts"]) != 1:
            continue
        part = h["parts"][0]
        for c in summary["comparisons"]:
            if {c["a_label"], c["b_label"]} != {_label(part["a"]), _label(part["b"])}:
                continue
            c["p_quoted"] = h["p_decision"]
            c["p_quoted_words"] = f"{h['name']}: {decision_words(h)}"
            c["hypothesis"] = h["name"]
            if c["p_quoted"] is not None and c["delta"] is not None:
                c["verdict"] = verdict(c["delta"], c["se"], c["df"], c["p_quoted"],
                                       summary["sesoi"], summary["alpha"],
                                       summary.get("lower_is_better", False),
                                       c.get("equivalence_reachable", True))


def _label(factors: dict) -> str:
    from analysis.collect import cell_label
    return cell_label(factors)
