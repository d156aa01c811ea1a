"""Paper figures (PNG + PDF), rendered from the summary dict only. One style: Okabe-Ito
colour-blind-safe palette (Okabe & Ito 2008), 8 pt type, widths for a two-column layout
(3.3 in single column, 6.8 in full width); vector PDF for the paper, 150 dpi PNG for
reading. Each function returns the numbers it plotted."""
from __future__ import annotations

import functools
import json
import math
import multiprocessing
import os
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import matplotlib
import matplotlib.ticker
import numpy as np

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from analysis.estimates import field_kind  # noqa: E402
from analysis.labels import (breakdown_file, breakdown_word, cell_words,  # noqa: E402
                             comparison_words, env_word, factor_words, field_words,
                             in_words, level, level_words, own_behaviour)
from analysis.lifelong import KIND, QUANTITIES, WORDS  # noqa: E402
from analysis.objective import ran_words  # noqa: E402
from analysis.tables import (behaviour_panels, constant_fields,  # noqa: E402
                             fmt, fmt_ci, has_change, has_curves, has_training, is_pct,
                             not_drawn, p_is, p_words, tex_escape)

OKABE_ITO = ["#0072B2", "#E69F00", "#009E73", "#D55E00", "#CC79A7", "#56B4E9",
             "#F0E442", "#000000"]
LINESTYLES = ["-", "--", ":", "-."]
SINGLE, DOUBLE = 3.3, 6.8

STYLE = {
    "font.size": 8, "axes.titlesize": 8, "axes.labelsize": 8, "legend.fontsize": 7,
    "xtick.labelsize": 7, "ytick.labelsize": 7, "axes.spines.top": False,
    "axes.spines.right": False, "axes.linewidth": 0.6, "lines.linewidth": 1.2,
    "grid.linewidth": 0.4, "grid.alpha": 0.4, "legend.frameon": False,
    "pdf.fonttype": 42, "ps.fonttype": 42, "savefig.dpi": 150,
    "savefig.bbox": "tight", "figure.dpi": 100,
}


def whole_ticks():
    """Tick locator for whole numbers only (steps, skills)."""
    return matplotlib.ticker.MaxNLocator(integer=True)


def colour(i: int) -> str:
    return OKABE_ITO[i % len(OKABE_ITO)]


def style(i: int) -> dict:
    return {"color": colour(i), "linestyle": LINESTYLES[(i // len(OKABE_ITO)) % 4]}


def _scale(summary):
    return 100.0 if is_pct(summary) else 1.0


def _kind(summary):
    """The analysed metric's kind: "rate", "count" or None (estimates.field_kind)."""
    return field_kind(summary.get("metric", "correct"))


def interval_words(summary: dict) -> str:
    """The level and method of the intervals a figure draws (stated in the figure)."""
    units = {c.get("interval") for c in summary.get("cells", [])} - {None}
    over = units.pop() if len(units) == 1 else "seeds and questions"
    over = over.split(" (")[0]
    return f"{level(summary['alpha'])} t intervals over {over}"


def _ylabel(summary):
    words = summary.get("metric_words", summary.get("metric", ""))
    return f"{words} (%)" if is_pct(summary) else words


def _save(fig, out: Path, name: str) -> list[dict]:
    """PNG and vector PDF; returns what each visible axis shows (its texts, whether it
    has data, its quantity's kind, the intervals drawn and its span: `note`), for the
    checks of tests/analysis/test_figures.py. An axis is never narrower than one unit of
    its data (`note(unit=...)`: a one-question step), so no axis magnifies noise."""
    wide = bool(fig.get_size_inches()[0] > SINGLE + 0.05)
    for ax in fig.axes:
        _floor_span(ax)
    axes = [{**_describe(ax), "wide": wide} for ax in fig.axes
            if ax.get_visible() and ax.axison]
    for p in (out / f"{name}.png", out / f"{name}.pdf"):   # no creation date: the same
        fig.savefig(p, metadata={"CreationDate": None} if p.suffix == ".pdf" else None)
    plt.close(fig)
    return axes


def note(ax, kind: str | None, lo, hi, interval: bool = True, unit: float | None = None,
         axis: str = "y") -> None:
    """Record the intervals an axis draws and their quantity's kind ("rate" in [0, 1],
    "count" >= 0, None: a difference or an unbounded mean); interval=False: the range of
    points drawn (seeds), not an interval, so no level to state; `unit`: one unit of the
    data in the axis's units (one question of the mean), the narrowest span allowed on
    `axis` ("x" or "y")."""
    rec = ax.__dict__.setdefault("_ablate_intervals", {"kind": kind, "lo": [], "hi": [],
                                                        "interval": False, "unit": None,
                                                        "axis": axis})
    rec["interval"] |= interval
    rec["lo"] += [float(v) for v in np.atleast_1d(lo)]
    rec["hi"] += [float(v) for v in np.atleast_1d(hi)]
    if unit is not None:
        rec["unit"], rec["axis"] = max(unit, rec["unit"] or 0.0), axis


def one_unit(summary: dict, pct: bool) -> float:
    """One question's step of a mean over the analysed questions, in plotted units."""
    return (100.0 if pct else 1.0) / max(int(summary.get("n_questions") or 1), 1)


def _describe(ax) -> dict:
    texts = [ax.get_title(), ax.get_title(loc="left"), ax.get_xlabel(), ax.get_ylabel()]
    texts += [t.get_text() for t in ax.get_xticklabels() + ax.get_yticklabels()]
    leg = ax.get_legend()
    texts += [t.get_text() for t in leg.get_texts()] if leg else []
    rec = ax.__dict__.get("_ablate_intervals", {"kind": None, "lo": [], "hi": [],
                                                 "interval": False, "unit": None,
                                                 "axis": "y"})
    lo, hi = ax.get_xlim() if rec["axis"] == "x" else ax.get_ylim()
    fig = ax.figure
    around = [fig._suptitle.get_text()] if fig._suptitle is not None else []
    around += [t.get_text() for leg in fig.legends for t in leg.get_texts()]
    return {"texts": [t for t in texts if t], "figure_texts": [t for t in around if t],
            "has_data": ax.has_data(), "span": float(hi - lo), **rec}


def _floor_span(ax) -> None:
    rec = ax.__dict__.get("_ablate_intervals")
    if not rec or not rec.get("unit"):
        return
    get, put = (ax.get_xlim, ax.set_xlim) if rec["axis"] == "x" else (ax.get_ylim, ax.set_ylim)
    lo, hi = get()
    if hi - lo >= rec["unit"]:
        return
    mid, half = (lo + hi) / 2, rec["unit"] / 2
    lo, hi = mid - half, mid + half
    if rec["kind"] in ("rate", "count") and lo < 0:         # a bounded quantity's floor
        lo, hi = 0.0, rec["unit"]
    put(lo, hi)


def _drop_unused(axes, used: int) -> None:
    """No empty panels: the grid positions past `used` are removed."""
    for ax in list(axes.flat)[used:]:
        ax.remove()


def _nothing_to_draw(out: Path, name: str) -> dict:
    """No figure `name`: one left in `out` by an earlier analysis is removed."""
    for ext in ("png", "pdf"):
        (out / f"{name}.{ext}").unlink(missing_ok=True)
    return {}


def _panels(summary: dict) -> list[tuple[str, list[int]]]:
    """Small multiples: one panel per level of the first factor (all cells if none)."""
    cells = summary["cells"]
    if not summary["factors"]:
        return [("", list(range(len(cells))))]
    f = summary["factors"][0]
    out = []
    for lv in summary["levels"][f]:
        members = [i for i, c in enumerate(cells) if str(c["factors"][f]) == str(lv)]
        if members:
            out.append((in_words(summary, {f: lv}), members))
    return out


def _within(summary: dict, c: dict) -> str:
    if len(summary["factors"] or []) <= 1:
        return cell_words(summary, c)
    rest = {k: v for k, v in c["factors"].items() if k != summary["factors"][0]}
    return in_words(summary, rest) if rest else cell_words(summary, c)


def learning_curves(summary: dict, out: Path) -> dict:
    """Metric vs step, one column per level of the first factor: above, each cell's mean;
    below, its paired change from the first evaluation with the interval the change's
    test uses (two cell bands would carry question variance that pairing removes, and
    could overlap where the test finds a change). Drawn only with three or more
    evaluation steps (two are a change: `change`)."""
    if not has_curves(summary):
        return _nothing_to_draw(out, "learning_curves")
    k, plotted = _scale(summary), {}
    # one factor: every cell on the same axes (a comparison at a glance, and no panel of
    # a cell that never moved); more: one column per level of the first factor
    panels = _panels(summary) if len(summary["factors"] or []) > 1 else [
        ("", list(range(len(summary["cells"]))))]
    cols = len(panels)
    width, height = SINGLE if cols == 1 else DOUBLE, 3.6 + 0.5 * (cols == 1)
    with plt.rc_context(STYLE):
        fig, axes = plt.subplots(2, cols, figsize=(width, height), squeeze=False,
                                 sharex="col", sharey="row")
        for col, (title, members) in enumerate(panels):
            top, bottom = axes[0, col], axes[1, col]
            for j, i in enumerate(members):
                c = summary["cells"][i]
                plotted.update(_curve_lines(top, bottom, summary, c, style(j), k))
            top.set_title(title)
            bottom.axhline(0, color="0.5", lw=0.6)
            bottom.set_xlabel("training step")
            _eval_ticks(bottom, summary, members)
            for ax in (top, bottom):
                ax.grid(True, axis="y")
        axes[0, 0].set_ylabel(_ylabel(summary))
        axes[1, 0].set_ylabel(f"change from step {_first_step(summary)}"
                              + (" (points)" if is_pct(summary) else ""))
        fig.suptitle("above: mean over seeds and questions;" + ("\n" if cols == 1 else " ")
                     + "below: paired change (by seed and question),\n"
                     + interval_words(summary), fontsize=7)
        rows = 0
        if any(len(m) > 1 for _, m in panels):   # one cell a panel: its title names it
            # below the axes, not on them: several cells' curves cross everywhere
            handles, labels = _legend_entries(fig)
            fig.legend(handles, labels, loc="lower center", ncol=min(4, len(labels)),
                       bbox_to_anchor=(0.5, -0.02))
            rows = -(-len(labels) // 4)
            fig.set_size_inches(width, height + 0.3 * rows)
        fig.tight_layout(rect=(0, 0.06 * rows, 1, 1))
        fig.align_ylabels(axes[:, 0])
        plotted["_axes"] = _save(fig, out, "learning_curves")
    return plotted


def _curve_lines(top, bottom, summary: dict, c: dict, st: dict, k: float) -> dict:
    cur = c.get("curve")
    if not cur or not cur["steps"]:
        return {}
    top.plot(cur["steps"], [v * k for v in cur["mean"]], marker="o", ms=2.5,
             label=_within(summary, c), **st)
    note(top, _kind(summary), cur["mean"], cur["mean"], interval=False,
         unit=one_unit(summary, is_pct(summary)))
    if "change_mean" in cur:
        bottom.fill_between(cur["steps"], [v * k for v in cur["change_lo"]],
                            [v * k for v in cur["change_hi"]], color=st["color"],
                            alpha=0.18, lw=0)
        note(bottom, None, [v * k for v in cur["change_lo"]],
             [v * k for v in cur["change_hi"]], unit=one_unit(summary, is_pct(summary)))
        bottom.plot(cur["steps"], [v * k for v in cur["change_mean"]], marker="o", ms=2.5,
                    **st)
    return {c["label"]: {key: cur[key] for key in cur}}


def _first_step(summary: dict):
    steps = [c["curve"]["steps"][0] for c in summary["cells"] if (c.get("curve") or {}).get("steps")]
    return min(steps) if steps else 0


def _eval_ticks(ax, summary: dict, members: list[int]) -> None:
    """Ticks at the evaluation steps (not every few optimizer steps)."""
    evals = sorted({s for i in members
                    for s in (summary["cells"][i].get("curve") or {}).get("steps", [])})
    if evals:
        ax.set_xticks(evals)
    else:
        ax.xaxis.set_major_locator(whole_ticks())


def _cell_of(summary: dict, factors: dict) -> dict | None:
    return next((c for c in summary["cells"] if all(
        str(c["factors"].get(k)) == str(v) for k, v in factors.items())), None)


def _warm_start(cells: list[dict]) -> float | None:
    """The mean at the first evaluation (step 0: the warm start the cells share), when
    every cell has the same one."""
    firsts = {round(c["curve"]["mean"][0], 12) for c in cells
              if (c.get("curve") or {}).get("steps") and c["curve"]["steps"][0] == 0}
    return firsts.pop() if len(firsts) == 1 else None


def finding(summary: dict, out: Path) -> dict:
    """The pre-registered primary comparison(s) (analysis.yaml `primary`): left, each
    seed's mean in the cells compared, with the warm start as a reference line; right,
    each difference with the interval and p of its table (hypotheses or comparisons)."""
    parts = summary.get("primary") or []
    if not parts or "finding" in not_drawn(summary):
        return _nothing_to_draw(out, "finding")
    k, unit = _scale(summary), one_unit(summary, is_pct(summary))
    cells = []
    for part in parts:
        for f in (part["b"], part["a"]):
            c = _cell_of(summary, f)
            if c is not None and c not in cells:
                cells.append(c)
    with plt.rc_context(STYLE):
        fig, (left, right) = plt.subplots(1, 2, figsize=(DOUBLE, 0.35 * len(parts) + 2.3),
                                          gridspec_kw={"width_ratios": [1, 1.25]})
        plotted = {"cells": _finding_seeds(left, summary, cells, k, unit),
                   "parts": _finding_differences(right, summary, parts, k, unit)}
        fig.suptitle("Pre-registered primary comparison"
                     + ("s" if len(parts) > 1 else "")
                     + f" at step {'/'.join(map(str, summary['steps']))}", fontsize=8)
        fig.tight_layout()
        plotted["_axes"] = _save(fig, out, "finding")
    return plotted


def _finding_seeds(ax, summary: dict, cells: list[dict], k: float, unit: float) -> dict:
    plotted = {}
    for x, c in enumerate(cells):
        sm = c["seed_means"]
        jitter = np.linspace(-0.12, 0.12, len(sm)) if len(sm) > 1 else [0.0]
        ax.plot([x + j for j in jitter], [v * k for v in sm], "o", ms=3.5, mfc="none",
                color=colour(x), alpha=0.85)
        ax.plot([x - 0.25, x + 0.25], [c["mean"] * k] * 2, color="k", lw=1.4)
        note(ax, _kind(summary), min(sm), max(sm), interval=False, unit=unit)
        plotted[c["label"]] = {"seed_means": sm, "mean": c["mean"]}
    warm = _warm_start(cells)
    if warm is not None:
        ax.axhline(warm * k, color="0.4", lw=0.8, ls="--",
                   label=f"warm start (step 0): {warm * k:.1f}")
        ax.legend(loc="best")
        plotted["warm_start"] = warm
    keys = [f for f in summary.get("factors") or []
            if len({str(c["factors"].get(f)) for c in cells}) > 1]
    ax.set_xticks(range(len(cells)))
    if len(keys) == 1:          # one factor differs: its levels below, its name once
        ax.set_xticklabels([level_words(summary, keys[0], c["factors"][keys[0]])
                            for c in cells])
        ax.set_xlabel(factor_words(summary, keys[0]))
    else:
        ax.set_xticklabels([in_words(summary, c["factors"], keys or None).replace("; ", "\n")
                            for c in cells], fontsize=6)
    ax.set_xlim(-0.6, len(cells) - 0.4)
    ax.set_ylabel(_ylabel(summary))
    unit_word = "sampling stream" if summary.get("evaluation_only") else "seed"
    ax.set_title(f"circles: one {unit_word} each; bar: mean", loc="left")
    ax.grid(True, axis="y")
    return plotted


def _finding_differences(ax, summary: dict, parts: list[dict], k: float,
                         unit: float) -> list[dict]:
    sesoi = summary.get("sesoi", 0.0) * k
    ax.axvspan(-sesoi, sesoi, color="0.9", lw=0, zorder=0)
    ax.axvline(0, color="0.2", lw=0.6)
    rows, labels = [], []
    for y, part in enumerate(reversed(parts)):
        lo, hi = part["ci"] if part["ci"] else (part["delta"], part["delta"])
        ax.plot([lo * k, hi * k], [y, y], color=colour(0), lw=1.8)
        ax.plot([part["delta"] * k], [y], "o", color=colour(0), ms=4)
        ax.annotate(_p_words(part, is_pct(summary)), (hi * k, y), xytext=(4, 0),
                    textcoords="offset points", va="center", fontsize=6.5)
        note(ax, None, lo, hi, unit=unit, axis="x")
        labels.append(_part_words(summary, part))
        rows.insert(0, {key: part[key] for key in ("label", "vs", "delta", "ci", "p",
                                                    "p_perm", "p_adj", "source")})
    ax.set_yticks(range(len(parts)))
    ax.set_yticklabels(labels)
    ax.set_ylim(-0.6, len(parts) - 0.4)
    ax.margins(x=0.35)
    ax.set_xlabel(f"difference in {summary.get('metric_words', '')}"
                  + (" (points)" if is_pct(summary) else ""))
    ax.set_title(f"{interval_words(summary)}; grey band: ±SESOI", loc="left")
    ax.grid(True, axis="x")
    return rows


def _part_words(summary: dict, part: dict) -> str:
    """'reward: shaped vs naive\n(H1)' / 'algorithm: GRPO\nchange from step 0'."""
    if part.get("kind") == "change":
        return f"{in_words(summary, part['a'])}\nchange from {part['vs']}"
    return comparison_words(summary, part) + (
        f"\n({part['source']})" if part["source"] != "comparison" else "")


def _p_words(part: dict, pct: bool) -> str:
    """'+4.8 [+1.5, +8.0]; p = 0.004 (exact p = 0.008)' and the adjusted p, as its table
    gives them (analysis.tables' formats)."""
    text = f"{fmt(part['delta'], pct, True)} {fmt_ci(part['ci'], pct, True)}"
    if part.get("p_adj") is not None:     # the one p its tables quote (hypotheses.quote)
        text += f"\n{p_is(part['p_adj'])}"
        if part.get("p_adj_words"):
            text += "\n" + part["p_adj_words"].replace(", Holm", ",\nHolm")
    elif part.get("p") is not None:       # a change: its paired test, no family
        text += f"\n{p_is(part['p'])}"
    return text


def forest(summary: dict, out: Path) -> dict:
    """Differences to the named baseline with 95% CI (thick), simultaneous CI (thin) and
    the +-SESOI band; filled markers: better or worse after Holm."""
    k = _scale(summary)
    comps = [c for c in summary["comparisons"]
             if c["family"] == "confirmatory" and c["delta"] is not None and c.get("ci")]
    if not comps:      # nothing compared (one cell): no empty axes (issue 65)
        return _nothing_to_draw(out, "forest")
    plotted = {"labels": [], "delta": [], "ci": []}
    sesoi = summary.get("sesoi", 0.0) * k
    with plt.rc_context(STYLE):
        fig, ax = plt.subplots(figsize=(SINGLE, 0.3 * max(len(comps), 1) + 0.9))
        ax.axvspan(-sesoi, sesoi, color="0.9", lw=0, zorder=0)
        for y, c in enumerate(reversed(comps)):
            sim = c.get("ci_simultaneous")
            if sim and all(v is not None and math.isfinite(v) for v in sim):
                ax.plot([sim[0] * k, sim[1] * k], [y, y], color="0.45", lw=0.6, zorder=1)
            col = colour(0) if c.get("kind") == "cell" else colour(1)
            ax.plot([c["ci"][0] * k, c["ci"][1] * k], [y, y], color=col, lw=1.8, zorder=2)
            ax.plot([c["delta"] * k], [y], marker="o", color=col, ms=4, zorder=3,
                    mfc=col if c["verdict"] in ("better", "worse") else "white")
            plotted["labels"].insert(0, comparison_words(summary, c))
            plotted["delta"].insert(0, c["delta"])
            plotted["ci"].insert(0, c["ci"])
        ax.axvline(0, color="0.2", lw=0.6)
        ax.set_yticks(range(len(comps)))
        ax.set_yticklabels([comparison_words(summary, c) for c in reversed(comps)])
        unit = " (points)" if is_pct(summary) else ""
        base = in_words(summary, summary.get("baseline") or {})
        ax.set_xlabel(f"difference in {summary.get('metric_words', '')}{unit}\n"
                      f"against {base}")
        ax.set_title(f"thick: {interval_words(summary)}; thin: simultaneous;\n"
                     "grey band: ±SESOI; filled: better/worse (the p its table quotes)",
                     loc="left")
        note(ax, None, [c["ci"][0] for c in comps], [c["ci"][1] for c in comps],
             unit=one_unit(summary, is_pct(summary)), axis="x")
        plotted["_axes"] = _save(fig, out, "forest")
    return plotted


def hops(summary: dict, out: Path) -> dict:
    """The metric by the tasks' `hops` (a difficulty level in the environment's words)."""
    k = _scale(summary)
    hop_keys, stem = summary.get("hops", []), breakdown_file(summary)   # its files' name
    if not hop_keys:
        return _nothing_to_draw(out, stem)
    cells = summary["cells"]
    n = max(len(cells), 1)
    plotted = {}
    with plt.rc_context(STYLE):
        fig, ax = plt.subplots(figsize=(SINGLE, 2.2))
        for i, c in enumerate(cells):
            xs, ys, lo, hi = [], [], [], []
            for j, h in enumerate(hop_keys):
                v = c["by_hops"].get(h)
                if v is None:
                    continue
                x = j + (i - (n - 1) / 2) * 0.8 / n
                xs.append(x)
                ys.append(v["mean"])
                lo.append(v["ci"][0])
                hi.append(v["ci"][1])
            ax.errorbar(xs, [y * k for y in ys],
                        yerr=[[(y - a) * k for y, a in zip(ys, lo)],
                              [(b - y) * k for y, b in zip(ys, hi)]],
                        fmt="o", ms=3, capsize=0, lw=1, color=colour(i),
                        label=cell_words(summary, c))
            plotted[c["label"]] = {"mean": ys, "lo": lo, "hi": hi}
            note(ax, _kind(summary), lo, hi, unit=one_unit(summary, is_pct(summary)))
        ax.set_xticks(range(len(hop_keys)))
        ax.set_xticklabels(hop_keys)
        ax.set_xlabel(breakdown_word(summary))
        ax.set_ylabel(_ylabel(summary))
        ax.set_title(interval_words(summary), loc="left", fontsize=7)
        ax.grid(True, axis="y")
        ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.25), ncol=2)
        plotted["_axes"] = _save(fig, out, stem)
    return plotted


def behaviour(summary: dict, out: Path) -> dict:
    """The behaviour metrics of each cell with 95% intervals, one panel per metric."""
    from analysis.estimates import RATES
    cells = summary["cells"]
    names, constant = behaviour_panels(summary)
    plotted = {}
    if not names:
        return _nothing_to_draw(out, "behaviour")
    cols = min(3, len(names))
    rows = math.ceil(len(names) / cols)
    with plt.rc_context(STYLE):
        fig, axes = plt.subplots(rows, cols, figsize=(SINGLE if cols == 1 else DOUBLE,
                                                      (0.18 * len(cells) + 0.7) * rows),
                                 squeeze=False, sharey=True)
        for a, nme in zip(axes.flat, names):
            kk = 100.0 if nme in RATES else 1.0
            for y, c in enumerate(reversed(cells)):
                v = c["behaviour"].get(nme)
                if v is None:
                    continue
                a.plot([v["ci"][0] * kk, v["ci"][1] * kk], [y, y], color=colour(0), lw=1.4)
                note(a, field_kind(nme), v["ci"][0], v["ci"][1],
                     unit=one_unit(summary, nme in RATES), axis="x")
                a.plot([v["mean"] * kk], [y], "o", color=colour(0), ms=3)
                plotted.setdefault(nme, {})[c["label"]] = v["mean"]
            a.set_title(field_words(nme, summary)
                        + (" (%)" if nme in RATES else ""))
            a.set_yticks(range(len(cells)))
            a.set_yticklabels([cell_words(summary, c) for c in reversed(cells)])
            a.xaxis.set_major_locator(matplotlib.ticker.MaxNLocator(nbins=4))  # no overlap
            a.set_ylim(-0.5, len(cells) - 0.5)   # the end rows clear of the spines
            a.grid(True, axis="x")
        _drop_unused(axes, len(names))
        head = interval_words(summary)
        if constant:   # named, not drawn: a panel of identical points says nothing
            head += "\nthe same in every cell: " + ", ".join(
                f"{field_words(n, summary)} = "
                + (f"{v * 100:g}%" if n in RATES else f"{v:g}") for n, v in constant.items())
        fig.suptitle(head, fontsize=7)
        fig.tight_layout()
        plotted["_axes"] = _save(fig, out, "behaviour")
    return plotted


def factor_intervals(summary: dict, out: Path) -> dict:
    """Marginal mean of each factor level (mean of the cells at that level) with its
    95% interval: rliable-style interval estimates (Agarwal et al. 2021)."""
    k = _scale(summary)
    factors = summary["factors"] or []
    plotted = {}
    levels = summary.get("factor_levels", [])
    if not factors or not levels:
        return plotted
    with plt.rc_context(STYLE):
        fig, axes = plt.subplots(1, len(factors), figsize=(min(DOUBLE, 2.2 * len(factors)),
                                 0.3 * max(len(v) for v in summary["levels"].values()) + 1.0),
                                 squeeze=False)
        for a, f in zip(axes.flat, factors):
            rows = [r for r in levels if r["factor"] == f]
            for y, r in enumerate(rows):
                a.plot([r["ci"][0] * k, r["ci"][1] * k], [y, y], color=colour(y), lw=4,
                       alpha=0.6, solid_capstyle="butt")
                a.plot([r["mean"] * k], [y], "|", color="k", ms=8)
                note(a, _kind(summary), r["ci"][0], r["ci"][1],
                     unit=one_unit(summary, is_pct(summary)), axis="x")
            a.set_yticks(range(len(rows)))
            a.set_yticklabels([level_words(summary, f, r["level"]) for r in rows])
            a.set_title(factor_words(summary, f))
            a.set_xlabel(_ylabel(summary))
            a.grid(True, axis="x")
            plotted[f] = {str(r["level"]): (r["mean"], r["ci"]) for r in rows}
        fig.suptitle(f"mean of the cells at each level; {interval_words(summary)}",
                     fontsize=7)
        fig.tight_layout()
        plotted["_axes"] = _save(fig, out, "factor_intervals")
    return plotted


TRAINING_PANELS = (("accuracy", "training accuracy", "rate"),
                   ("answered", "training answer rate", "rate"),
                   ("reward/mean", "training reward", None))


def _reward_groups(summary: dict) -> list[tuple[str, list[int]]]:
    """Cells grouped by reward (`reward.name` when it is a factor): rewards of different
    schemes have different ranges, so each gets its own axis."""
    cells = summary["cells"]
    key = next((f for f in summary["factors"] if f == "reward.name"), None)
    if key is None:
        return [("", list(range(len(cells))))]
    levels = list(dict.fromkeys(str(c["factors"][key]) for c in cells))
    return [(f" ({lv})", [i for i, c in enumerate(cells) if str(c["factors"][key]) == lv])
            for lv in levels]


def _band(m, se, kind):
    """Mean +- one SE over seeds; for a rate on the logit scale (delta method), so that
    the band stays inside [0, 1] (Agresti 2013, Categorical Data Analysis, sec. 1.4)."""
    m, se = np.asarray(m, float), np.asarray(se, float)
    if kind != "rate":
        return m - se, m + se
    mc = np.clip(m, 1e-6, 1 - 1e-6)
    h = se / (mc * (1 - mc))
    lo, hi = [1 / (1 + np.exp(-(np.log(mc / (1 - mc)) + s * h))) for s in (-1, 1)]
    flat = (m <= 0) | (m >= 1)
    return np.where(flat, m, lo), np.where(flat, m, hi)


def _training_panels(summary: dict) -> tuple[list[tuple], dict[str, float]]:
    """The training panels drawn, and those one value at every step of every cell
    (named in the title, not drawn: e.g. a repair rate of 0 throughout)."""
    panels, constant = [], {}
    for key, title, kind, members in _training_axes(summary):
        vals = {v for i in members for v in summary["cells"][i]["train_curves"][key]["mean"]}
        if len(vals) == 1:
            constant[title] = vals.pop()
        else:
            panels.append((key, title, kind, members))
    return panels, constant


def _training_axes(summary: dict) -> list[tuple]:
    env = summary.get("env")
    out = []
    for key, title, kind in TRAINING_PANELS:
        members = [i for i, c in enumerate(summary["cells"]) if key in c.get("train_curves", {})]
        if not members:
            continue
        groups = _reward_groups(summary) if key == "reward/mean" else [("", members)]
        out += [(key, env_word(title, env) + tail, kind, [i for i in g if i in members])
                for tail, g in groups if any(i in members for i in g)]
    return out


def training(summary: dict, out: Path) -> dict:
    """The sampled training episodes per optimizer step (metrics.jsonl): accuracy, answer
    rate and each reward scheme's reward on its own axis, mean over seeds with a band of
    one SE over seeds (logit scale for rates)."""
    panels, constant = _training_panels(summary)
    plotted = {}
    if not panels or not has_training(summary):
        return _nothing_to_draw(out, "training")
    cols = min(3, len(panels))
    rows = math.ceil(len(panels) / cols)
    with plt.rc_context(STYLE):
        fig, axes = plt.subplots(rows, cols, figsize=(DOUBLE, 2.0 * rows + 0.5), squeeze=False)
        for ax, (key, title, kind, members) in zip(axes.flat, panels):
            for i in members:
                c = summary["cells"][i]
                cur = c["train_curves"][key]
                lo, hi = _band(cur["mean"], cur.get("se", [0.0] * len(cur["mean"])), kind)
                ax.plot(cur["steps"], cur["mean"], label=cell_words(summary, c), **style(i))
                ax.fill_between(cur["steps"], lo, hi, alpha=0.2, color=colour(i), lw=0)
                note(ax, kind, lo, hi)
                plotted.setdefault(key, {})[c["label"]] = cur["mean"]
            ax.set_title(title)
            ax.set_xlabel("optimizer step")
            ax.xaxis.set_major_locator(whole_ticks())
            ax.grid(True, axis="y")
        _drop_unused(axes, len(panels))
        handles, labels = _legend_entries(fig)
        fig.legend(handles, labels, loc="lower center", ncol=min(4, len(labels)),
                   bbox_to_anchor=(0.5, -0.02))
        fig.suptitle("sampled training episodes; mean over seeds, band ±1 SE over seeds "
                     "(logit scale for rates)" + ("\nthe same at every step in every cell "
                     "(not drawn): " + ", ".join(f"{t} = {v:g}" for t, v in constant.items())
                     if constant else ""), fontsize=7)
        fig.tight_layout(rect=(0, 0.08 + 0.04 * (len(labels) > 4), 1, 1))
        plotted["_axes"] = _save(fig, out, "training")
    return plotted


def _legend_entries(fig):
    seen = {}
    for ax in fig.axes:
        for h, lab in zip(*ax.get_legend_handles_labels()):
            seen.setdefault(lab, h)
    return list(seen.values()), list(seen)


def change(summary: dict, out: Path) -> dict:
    """Each cell's change from its first evaluation as a paired difference (per seed and
    question, analysis.summary) with its 95% interval: one axis per quantity (the metric,
    then the behaviour fields of the tables that changed), not a line between two points."""
    from analysis.estimates import RATES
    from analysis.tables import BEHAVIOUR_TABLE
    metric = summary["metric"]
    cells = [c for c in summary["cells"] if (c.get("change") or {}).get(metric)]
    if not has_change(summary) or not cells:
        return _nothing_to_draw(out, "change")
    names = [n for n in BEHAVIOUR_TABLE + own_behaviour(summary)
             if n != metric and all(n in c["change"] for c in cells)]
    same = [n for n, v in constant_fields(cells, "change", [metric] + names).items()
            if v == 0]                              # no change in any cell: named, not drawn
    names = [n for n in [metric] + names if n not in same][:6]
    cols = min(3, len(names))
    rows = math.ceil(len(names) / cols)
    title = _change_title(summary, cells[0]["change"][metric]["from_step"], same, cols)
    plotted = {}
    with plt.rc_context(STYLE):
        fig, axes = plt.subplots(rows, cols, figsize=(
            SINGLE if cols == 1 else DOUBLE,
            (0.2 * len(cells) + 0.9) * rows + 0.14 * title.count("\n")), squeeze=False,
            sharey=True)
        for ax, name in zip(axes.flat, names):
            pct = (name == metric and is_pct(summary)) or name in RATES
            kk = 100.0 if pct else 1.0
            for y, c in enumerate(reversed(cells)):
                v = c["change"][name]
                ax.plot([v["ci"][0] * kk, v["ci"][1] * kk], [y, y], color=colour(0), lw=1.4)
                ax.plot([v["mean"] * kk], [y], "o", color=colour(0), ms=3)
                plotted.setdefault(name, {})[c["label"]] = (v["mean"], v["ci"])
            note(ax, None, [c["change"][name]["ci"][0] for c in cells],
                 [c["change"][name]["ci"][1] for c in cells], unit=one_unit(summary, pct),
                 axis="x")
            ax.axvline(0, color="0.2", lw=0.6)
            words = summary["metric_words"] if name == metric else field_words(name, summary)
            ax.set_title(words)
            ax.set_xlabel("change (points)" if pct else "change")
            ax.set_yticks(range(len(cells)))
            ax.set_yticklabels([cell_words(summary, c) for c in reversed(cells)])
            ax.xaxis.set_major_locator(matplotlib.ticker.MaxNLocator(nbins=4))  # no overlap
            ax.set_ylim(-0.5, len(cells) - 0.5)   # the end rows clear of the spines
            ax.grid(True, axis="x")
        _drop_unused(axes, len(names))
        fig.suptitle(title, fontsize=8)
        fig.tight_layout()
        plotted["_axes"] = _save(fig, out, "change")
    return plotted


def _change_title(summary: dict, from_step, same: list[str], cols: int) -> str:
    """The change figure's title; it names the fields with no change in any cell (not
    drawn), e.g. turns in a one-turn task."""
    words = ", ".join(summary["metric_words"] if n == summary["metric"]
                      else field_words(n, summary) for n in same)
    return (f"change from step {'/'.join(map(str, from_step))} to the analysed step,"
            + ("\n" if cols == 1 else " ") + "paired by seed and question "
            f"({level(summary['alpha'])} intervals)"
            + (f"\nno change in any cell: {words}" if same else ""))


def seeds(summary: dict, out: Path) -> dict:
    """Per-seed dot plot: each seed's mean (dots), the cell mean (bar) and the
    interquartile mean (diamond, Agarwal et al. 2021), so that bimodal seeds show."""
    k = _scale(summary)
    cells = summary["cells"]
    plotted = {}
    with plt.rc_context(STYLE):
        fig, ax = plt.subplots(figsize=(SINGLE, 0.25 * len(cells) + 0.9))
        for y, c in enumerate(reversed(cells)):
            sm = c["seed_means"]
            ax.plot([v * k for v in sm], [y] * len(sm), "o", color=colour(0), ms=3.5,
                    alpha=0.75, mfc="none")
            ax.plot([c["mean"] * k], [y], "|", color="k", ms=10)
            if c.get("iqm") is not None:
                ax.plot([c["iqm"] * k], [y], "D", color=colour(1), ms=3)
            note(ax, _kind(summary), min(sm), max(sm), interval=False,
                 unit=one_unit(summary, is_pct(summary)), axis="x")
            plotted[c["label"]] = {"seed_means": sm, "mean": c["mean"], "iqm": c.get("iqm")}
        ax.set_yticks(range(len(cells)))
        ax.set_yticklabels([cell_words(summary, c) for c in reversed(cells)])
        ax.set_xlabel(_ylabel(summary))
        unit = "sampling stream" if summary.get("evaluation_only") else "seed"
        ax.set_title(f"circles: one {unit} each; bar: mean; diamond: IQM", loc="left")
        ax.grid(True, axis="x")
        plotted["_axes"] = _save(fig, out, "seeds")
    return plotted


MARKERS = "osD^v<>p"


def _lifelong_panel(ax, summary: dict, q: str, steps: tuple) -> dict:
    """One lifelong quantity: each seed a thin line, each arm's mean over seeds a thick
    one with the arm's colour, line style and marker, later arms' markers smaller (arms
    on the same values stay visible: a dashed line over a solid one); rates in % on
    [0, 100], counts from 0; every axis spans the design's steps."""
    rate = KIND[q] == "rate"
    k, plotted, vals = (100.0 if rate else 1.0), {}, []
    for i, c in enumerate(summary["cells"]):
        cur = (c.get("lifelong") or {}).get("curves", {}).get(q)
        if not cur:
            continue
        for v in cur["seeds"].values():
            ax.plot(v["steps"], [x * k for x in v["values"]], color=colour(i), lw=0.6,
                    alpha=0.45)
            vals += v["values"]
        ax.plot(cur["steps"], [x * k for x in cur["mean"]], marker=MARKERS[i % 8],
                ms=max(2.5, 5.0 - 1.2 * i), mfc="white", lw=1.6, color=colour(i),
                linestyle=LINESTYLES[i % 4], label=cell_words(summary, c))
        plotted[c["label"]] = {"steps": cur["steps"], "mean": cur["mean"]}
    note(ax, KIND[q], min(vals, default=0.0), max(vals, default=0.0), interval=False,
         unit=one_unit(summary, True) if rate else 1.0)
    ax.set_title(env_word(WORDS[q], summary.get("env")) + (" (%)" if rate else ""))
    ax.set_xlabel("training step")
    ax.xaxis.set_major_locator(whole_ticks())
    top = 100.0 if rate else max(1.0, max(vals, default=0.0) * 1.1)
    ax.set_ylim(-0.03 * top, 1.03 * top)          # a line at 0 is not hidden by the axis
    pad = max(0.3, 0.04 * (steps[1] - steps[0]))
    ax.set_xlim(steps[0] - pad, steps[1] + pad)
    if q == "library_size":
        ax.yaxis.set_major_locator(whole_ticks())
    ax.grid(True, axis="y")
    return plotted


def _lifelong_steps(summary: dict) -> tuple:
    steps = [s for c in summary["cells"] for cur in (c.get("lifelong") or {}).get(
        "curves", {}).values() for v in cur["seeds"].values() for s in v["steps"]]
    return min(steps), max(steps)


def lifelong_panels(summary: dict) -> tuple[list[str], dict[str, float]]:
    """The lifelong quantities drawn, and those one value at every step of every seed and
    cell (named, not drawn: an all-zero panel shows nothing)."""
    have = [q for q in QUANTITIES if any(
        q in (c.get("lifelong") or {}).get("curves", {}) for c in summary["cells"])]
    constant = {}
    for q in have:
        vals = {x for c in summary["cells"]
                for v in ((c.get("lifelong") or {}).get("curves", {}).get(q) or {}).get(
                    "seeds", {}).values() for x in v["values"]}
        if len(vals) == 1:
            constant[q] = vals.pop()
    return [q for q in have if q not in constant], constant


def lifelong(summary: dict, out: Path) -> dict:
    """The lifelong curves of a design with skill-library cells (analysis.lifelong):
    library size, skills used per episode, held-out solve rate and forgetting over
    training steps, one axis per quantity; the legend in the cells' order."""
    panels, constant = lifelong_panels(summary)
    if not panels:
        return _nothing_to_draw(out, "lifelong")
    cols = min(2, len(panels))
    rows = math.ceil(len(panels) / cols)
    plotted = {}
    with plt.rc_context(STYLE):
        fig, axes = plt.subplots(rows, cols, figsize=(DOUBLE, 2.0 * rows + 0.6),
                                 squeeze=False)
        for ax, q in zip(axes.flat, panels):
            plotted[q] = _lifelong_panel(ax, summary, q, _lifelong_steps(summary))
        _drop_unused(axes, len(panels))
        handles, labels = _legend_entries(fig)
        order = [cell_words(summary, c) for c in summary["cells"]
                 if cell_words(summary, c) in labels]
        fig.legend([handles[labels.index(lab)] for lab in order], order, loc="lower center",
                   ncol=min(4, len(order)), bbox_to_anchor=(0.5, -0.02))
        fig.suptitle("thin lines: one seed each; thick: the mean over seeds" + (
            "\nthe same at every step in every cell (not drawn): " + ", ".join(
                f"{env_word(WORDS[q], summary.get('env'))} = {v * (100 if KIND[q] == 'rate' else 1):g}"
                + ("%" if KIND[q] == "rate" else "") for q, v in constant.items())
            if constant else ""), fontsize=8)
        fig.tight_layout(rect=(0, 0.07 + 0.04 * (len(labels) > 4), 1, 1))
        plotted["_axes"] = _save(fig, out, "lifelong")
    return plotted


def write_all(summary: dict, out: Path, workers: int | None = None) -> dict:
    """Every figure. Drawing dominates the report's time (about 0.2-1 s of CPU per figure
    for 18 cells, benchmarks/bench_analysis.py), so with 4 or more CPUs the figures are
    drawn in forked processes, one per figure; on fewer, sequentially."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    figs = {"finding": finding, "learning_curves": learning_curves, "change": change, "forest": forest,
            "seeds": seeds, "hops": hops, "behaviour": behaviour,
            "factor_intervals": factor_intervals, "training": training,
            "lifelong": lifelong}
    skip = not_drawn(summary)       # the report says why (analysis.tables.not_drawn)
    figs = {name: (_skipped(name) if name in skip else fn) for name, fn in figs.items()}
    if workers is None:
        cpus = (len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity")
                else os.cpu_count() or 1)
        workers = min(len(figs), cpus) if cpus >= 4 else 1
    if workers <= 1 or "fork" not in multiprocessing.get_all_start_methods():
        drawn = {name: fn(summary, out) for name, fn in figs.items()}
    else:
        with ProcessPoolExecutor(workers,
                                 mp_context=multiprocessing.get_context("fork")) as ex:
            futures = {name: ex.submit(fn, summary, out) for name, fn in figs.items()}
            drawn = {name: f.result() for name, f in futures.items()}
    write_captions(summary, out, drawn)
    return drawn


def _skipped(name: str):
    """A drawing function that draws nothing (and removes an earlier figure `name`)."""
    return functools.partial(_skip, name)


def _skip(name: str, summary: dict, out: Path) -> dict:
    return _nothing_to_draw(out, name)


def _design(summary: dict) -> str:
    """'5 seeds per cell, 136 held-out questions, step 24'."""
    seeds = sorted({c["n_seeds"] for c in summary["cells"]})
    unit = "sampling streams" if summary.get("evaluation_only") else "seeds"
    qs = sorted({c["n_questions"] for c in summary["cells"]})
    ran = ran_words(summary)        # the world, the reward and its weights (issue 63)
    return (f"{'/'.join(map(str, seeds))} {unit} per cell, "
            f"{'/'.join(map(str, qs))} held-out questions, analysed at step "
            f"{'/'.join(map(str, summary['steps']))}" + (f"; {ran}" if ran else ""))


def caption(summary: dict, name: str) -> str:
    """What figure `name` draws, on what design, with which intervals and test."""
    words = summary.get("metric_words", summary.get("metric", ""))
    iv = interval_words(summary)
    design = _design(summary)
    base = in_words(summary, summary.get("baseline") or {})
    pct = is_pct(summary)
    sesoi = summary.get("sesoi", 0) * (100 if pct else 1)
    first = summary["factors"][0] if summary.get("factors") else None
    panel = f", one panel per {factor_words(summary, first)}" if first else ""
    # "held-out accuracy" already says held-out; other metrics get the word
    held = words[:1].upper() + words[1:] if words.lower().startswith("held-out") \
        else f"Held-out {words}"
    text = {
        "finding": f"The pre-registered primary comparison(s) (analysis.yaml `primary`). "
                   f"Left: {words} of each seed (circles) and the mean over seeds (bar) in "
                   "the cells compared; dashed: the warm start at step 0. Right: the "
                   f"difference with {iv} and the one p its tables quote (named: the "
                   "test and the family it is adjusted over); grey band: the smallest "
                   "effect of interest.",
        "learning_curves": f"{held} at each evaluation step{panel}: above, the mean over "
                           "seeds of per-seed means over questions; below, the paired change "
                           "from the first evaluation (by seed and question) with "
                           f"{iv}, the interval of the change's test.",
        "change": f"Change in {words} (and in the behaviour fields that changed) from the "
                  f"first evaluation to the analysed step, paired by seed and question, "
                  f"with {iv} (the interval of the paired test of the change).",
        "forest": f"Difference in {words} of each cell (and factor main effect) to the "
                  f"baseline ({base}), on the questions both evaluated: {iv} (thick), "
                  f"simultaneous max-|t| intervals (thin); grey band: the smallest effect of "
                  f"interest, ±{sesoi:g}{' points' if pct else ''}; filled markers: "
                  f"p < {summary['alpha']} ({p_words(summary)}).",
        "seeds": f"Each seed's mean {words} over the questions (circles), the cell mean "
                 "(bar) and the interquartile mean over seeds (diamond); no interval.",
        "hops": f"{held} by {breakdown_word(summary)}, with {iv}.",
        "behaviour": f"Behaviour of the held-out episodes per cell, with {iv}; fields equal "
                     "in every cell are named, not drawn.",
        "factor_intervals": f"Mean {words} of the cells at each level of each factor, "
                            f"with {iv}.",
        "training": "Sampled training episodes per optimizer step: mean over seeds with a "
                    "band of ±1 SE over seeds (logit scale for rates); not held-out "
                    "questions, no test.",
        "lifelong": "Skill-library quantities over training steps: thin lines one seed "
                    "each, thick the mean over seeds; descriptive, no interval.",
    }[name]
    return f"{text} {design[:1].upper()}{design[1:]}."


BUILTIN = ("finding", "learning_curves", "change", "forest", "seeds", "hops", "behaviour",
           "factor_intervals", "training", "lifelong", "trend", "endpoint")


def write_captions(summary: dict, out: Path, drawn: dict) -> None:
    """For each figure drawn: figure_<name>.tex (\\includegraphics, \\caption, \\label),
    for a paper to \\input, and captions.md with every caption; snippets of figures no
    longer drawn are removed."""
    out = Path(out)
    md = ["# Figure captions", "", "Generated by `python -m analysis` from summary.json; "
          "each figure's LaTeX snippet is figure_<name>.tex (set \\ablatefigdir to this "
          "folder, relative to the paper).", ""]
    for name, plotted in drawn.items():
        stem = breakdown_file(summary) if name == "hops" else name     # the files' name
        if not plotted or not plotted.get("_axes"):
            (out / f"figure_{stem}.tex").unlink(missing_ok=True)
            continue
        text = caption(summary, name)
        _snippet(out, stem, text, bool(plotted["_axes"][0].get("wide")))
        md += [f"**{stem}** ({stem}.png, {stem}.pdf, figure_{stem}.tex): {text}", ""]
    (out / "captions.md").write_text("\n".join(md))


def script_captions(out: Path) -> list[str]:
    """An experiment script's figures (analysis.yaml `scripts:`): each NAME.png beside
    its NAME.caption.txt (the script writes both) gets figure_NAME.tex and its caption
    appended to captions.md; returns the figures without a caption file."""
    out = Path(out)
    missing, md = [], []
    ours = set(BUILTIN) | ({breakdown_file(json.loads((out / "summary.json").read_text()))}
                           if (out / "summary.json").is_file() else set())
    for png in sorted(out.glob("*.png")):
        name = png.stem
        if name in ours:      # the analysis' own (the breakdown's: the world's label)
            continue
        cap = out / f"{name}.caption.txt"
        if not cap.is_file():
            missing.append(name)
            continue
        text = " ".join(cap.read_text().split())
        _snippet(out, name, text, wide=True)
        md += [f"**{name}** ({name}.png, {name}.pdf, figure_{name}.tex; drawn by the "
               f"experiment's own script): {text}", ""]
    with open(out / "captions.md", "a") as f:
        f.write("\n" + "\n".join(md) if md else "")
    return missing


def _snippet(out: Path, name: str, text: str, wide: bool) -> None:
    from analysis.collect import shown
    where = shown(out)
    parts = Path(where).parts
    tag = parts[1] if len(parts) > 1 and parts[0] == "experiments" else "ablate"
    env = "figure*" if wide else "figure"
    (out / f"figure_{name}.tex").write_text("\n".join([
        f"% {name}: generated by python -m analysis; \\input it from a paper",
        f"\\providecommand{{\\ablatefigdir}}{{{where}/}}",
        f"\\begin{{{env}}}[t]", "\\centering",
        f"\\includegraphics[width=\\linewidth]{{\\ablatefigdir {name}.pdf}}",
        f"\\caption{{{tex_escape(text)}}}",
        f"\\label{{fig:{tag}:{name}}}", f"\\end{{{env}}}", ""]))
