"""The figure of the pre-registered trend test (analysis.yaml `trend:`, analysis.trend):
left, each seed's mean per level of the factor with the level's median; right, the exact
null distribution of the Jonckheere-Terpstra count with the observed count marked and the
one p its tables quote (issue 65: no figure showed the headline test). Kept out of
analysis/figures.py (house rule: files <= 600 lines); analysis.cli calls `write` after
analysis.figures.write_all."""
from __future__ import annotations

from pathlib import Path

import numpy as np


def trend(summary: dict, out: Path) -> dict:
    from analysis import figures as F
    from analysis.hypotheses import decision_words
    from analysis.labels import factor_words, level_words
    from analysis.trend import jt_null
    t = summary.get("trend")
    if not t:
        return F._nothing_to_draw(out, "trend")
    k = F._scale(summary)
    plt = F.plt
    with plt.rc_context(F.STYLE):
        fig, (ax, nx) = plt.subplots(1, 2, figsize=(F.DOUBLE, 2.6),
                                     gridspec_kw={"width_ratios": [1.1, 1], "wspace": 0.45})
        xs = range(len(t["levels"]))
        for i, v in zip(xs, t["seed_means"]):
            ax.plot(np.full(len(v), i) + np.linspace(-0.12, 0.12, len(v)),
                    np.asarray(v) * k, "o", ms=3.5, color=F.colour(0), mec="none", alpha=0.8)
        ax.plot(list(xs), [float(np.median(v)) * k for v in t["seed_means"]], "-",
                color="0.3", lw=1, label="median of the seeds")
        ax.set_xticks(list(xs), [level_words(summary, t["factor"], lv) for lv in t["levels"]])
        ax.set_xlabel(factor_words(summary, t["factor"]))
        unit = " (%)" if F.is_pct(summary) else ""
        ax.set_ylabel(f"{summary.get('metric_words', '')}{unit}, one dot a seed")
        ax.legend(loc="lower left")
        F.note(ax, None, [min(map(min, t["seed_means"])) * k],
               [max(map(max, t["seed_means"])) * k], interval=False)
        null = jt_null(t["seed_means"])
        total = sum(null.values())
        # half-integer counts (tied seeds) fall into the integer bin below: one bar a bin
        bins = np.arange(t["pairs"] + 1)
        probs = np.zeros(bins.size)
        np.add.at(probs, [int(t["pairs"] - float(v)) for v in null],
                  [n / total for n in null.values()])
        vals = bins[probs > 0]
        nx.bar(vals, probs[probs > 0], width=1.0, color="0.6",
               label="exact null (every assignment)")
        nx.axvline(t["J_decreasing"], color=F.colour(5), lw=1.5,
                   label=f"observed: {t['J_decreasing']:g} of {t['pairs']}")
        nx.set_xlabel(f"seed pairs ordered {t['expect']} across levels (Jonckheere-Terpstra)")
        nx.set_ylabel("probability under no trend")
        nx.set_title(f"{t['name']}: p = {t['p_decision']:.3f}\n{decision_words(t)}",
                     loc="left")
        nx.legend(loc="center left")
        F.note(nx, None, [float(vals.min())], [float(vals.max())], interval=False)
        return {"_axes": F._save(fig, out, "trend"), "p": t["p_decision"]}


def write(summary: dict, out: Path) -> dict:
    """Draw the figure, write its LaTeX snippet and append its caption to captions.md."""
    from analysis import figures as F
    drawn = trend(summary, out)
    if drawn:
        text = f"{caption(summary)} {F._design(summary)[:1].upper()}{F._design(summary)[1:]}."
        F._snippet(out, "trend", text, wide=True)
        with open(out / "captions.md", "a") as f:
            f.write(f"**trend** (trend.png, trend.pdf, figure_trend.tex): {text}\n\n")
    else:
        (out / "figure_trend.tex").unlink(missing_ok=True)
    return drawn


def caption(summary: dict) -> str:
    t = summary["trend"]
    return (f"The pre-registered trend test {t['name']} (analysis.yaml `trend`): left, each "
            f"seed's mean {summary.get('metric_words', '')} over the questions at each level "
            f"of {t['factor']}, the line the median of the seeds; right, the exact null "
            "distribution of the Jonckheere-Terpstra count of seed pairs ordered "
            f"{t['expect']} (every assignment of the seed means to the levels equally "
            "likely), the observed count marked, and the p every output quotes.")
