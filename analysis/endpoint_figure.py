"""The figure of the binary per-seed endpoint (analysis.yaml `endpoint:`,
analysis.endpoint): left, each cell's rate of seeds with the outcome, its exact
(Clopper-Pearson) interval, "k of n" and Fisher's p against the baseline; right, each
seed's metric, crosses for the seeds with the outcome (issue 65: a pre-registered
endpoint is shown, not only tabled). Kept out of analysis/figures.py (its size cap, as
analysis/trend_figure.py); analysis.cli calls `write` after analysis.figures.write_all."""
from __future__ import annotations

from pathlib import Path

from analysis import figures as F
from analysis.endpoint import SIDE_WORDS
from analysis.labels import cell_words, level
from analysis.tables import p_is
def endpoint(summary: dict, out: Path) -> dict:
    """The binary per-seed endpoint (analysis.endpoint): left, each cell's rate of seeds
    with the outcome and its exact interval, "k of n" and Fisher's p against the baseline;
    right, each seed's metric, crosses for the seeds with the outcome."""
    e = summary.get("endpoint")
    if not e or not e["cells"]:
        return F._nothing_to_draw(out, "endpoint")
    k, cells = F._scale(summary), e["cells"]
    by = {c["label"]: c for c in summary["cells"]}
    vs = {c["label"]: c for c in e["comparisons"]}
    plotted = {"labels": [], "rate": [], "ci": [], "p": []}
    with F.plt.rc_context(F.STYLE):
        fig, (left, right) = F.plt.subplots(1, 2, sharey=True,
                                            figsize=(F.DOUBLE, 0.32 * len(cells) + 1.2))
        for y, c in enumerate(reversed(cells)):
            lo, hi = (100 * v for v in c["ci"])
            left.plot([lo, hi], [y, y], color=F.colour(0), lw=1.8)
            left.plot([100 * c["rate"]], [y], "o", color=F.colour(0), ms=4)
            cmp = vs.get(c["label"])
            left.annotate(f"{c['k']} of {c['n']}" + (f", {p_is(cmp['p_quoted'])}" if cmp
                                                      else ", baseline"),
                          (hi, y), xytext=(4, 0), textcoords="offset points", va="center",
                          fontsize=7)
            _seeds(right, by[c["label"]], set(c["seeds"]), y, k)
            plotted["labels"].insert(0, cell_words(summary, c))
            plotted["rate"].insert(0, c["rate"])
            plotted["ci"].insert(0, c["ci"])
            plotted["p"].insert(0, cmp["p_quoted"] if cmp else None)
        F.note(left, "rate", [c["ci"][0] for c in cells], [c["ci"][1] for c in cells], axis="x")
        left.set_xlim(0, 100)
        left.set_yticks(range(len(cells)))
        left.set_yticklabels([cell_words(summary, c) for c in reversed(cells)])
        left.set_xlabel(f"seeds {e['name']} (%)")
        left.set_title(f"exact (Clopper-Pearson) {level(summary['alpha'])} intervals;\n"
                       f"Fisher's exact p vs the baseline\n({SIDE_WORDS[e['expect']]})",
                       loc="left")
        seeds = [m for c in cells for m in by[c["label"]]["seed_means"]]
        F.note(right, F._kind(summary), min(seeds), max(seeds), interval=False,
               unit=F.one_unit(summary, F.is_pct(summary)), axis="x")
        right.set_xlabel(F._ylabel(summary))
        right.set_title(f"one mark per seed; crosses: {e['name']}", loc="left")
        for ax in (left, right):
            ax.grid(True, axis="x")
        plotted["_axes"] = F._save(fig, out, "endpoint")
    return plotted


def _seeds(ax, cell: dict, hit: set, y: float, k: float) -> None:
    """One cell's seeds at height y: crosses for those with the outcome, circles else."""
    pairs = list(zip(cell["seeds"], cell["seed_means"]))
    yes = [m * k for sd, m in pairs if sd in hit]
    no = [m * k for sd, m in pairs if sd not in hit]
    ax.plot(no, [y] * len(no), "o", color=F.colour(0), ms=3.5, mfc="none", alpha=0.75)
    ax.plot(yes, [y] * len(yes), "x", color=F.colour(3), ms=4.5)


def caption(summary: dict) -> str:
    words = summary.get("metric_words", summary.get("metric", ""))
    e = summary["endpoint"]
    when = f" Added {e['added']}." if e.get("added") else " Pre-registered."
    return (f"The binary per-seed endpoint: a seed counts as {e['name']} when "
            f"{e['words']}. Left: the share of seeds that did per cell, with its exact "
            f"(Clopper-Pearson) {level(summary['alpha'])} interval, the count and Fisher's "
            f"exact p against the baseline ({SIDE_WORDS[e['expect']]}; Holm over the cells). "
            f"Right: {words} of each seed, crosses for the seeds {e['name']}.{when}")


def write(summary: dict, out: Path) -> dict:
    """Draw the figure, write its LaTeX snippet and append its caption to captions.md."""
    drawn = endpoint(summary, out)
    if drawn:
        design = F._design(summary)
        text = f"{caption(summary)} {design[:1].upper()}{design[1:]}."
        F._snippet(out, "endpoint", text, wide=True)
        with open(out / "captions.md", "a") as f:
            f.write(f"**endpoint** (endpoint.png, endpoint.pdf, figure_endpoint.tex): "
                    f"{text}\n\n")
    else:
        (out / "figure_endpoint.tex").unlink(missing_ok=True)
    return drawn
