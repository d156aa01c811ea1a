"""Claims that cannot drift from the rows: a README's results prose is a template.

A markdown file holds generated blocks

    <!-- findings:begin findings.md -->
    ...rendered text...
    <!-- findings:end -->

whose opening marker names a Jinja2 template (relative to the markdown file). The
template writes numbers only through named quantities of an experiment's
results/report/summary.json (and the JSON files its analysis.yaml lists under
`quantities:`), with the filters below, so a republished report rewrites every number
of the prose. Names a template sees (experiment = the directory of the markdown file
when it holds an analysis.yaml; the index READMEs see only `exp`):

    s       the summary.json                 cell["reward=naive"]   a cell by label
    vs      cell label -> its comparison against the baseline
    H       hypothesis name -> its verdict   q.<name>   a `quantities:` JSON file
    exp.<experiment>  the same names for every experiment under experiments/

Filters (FILTERS): pct / spct (a rate in percent or signed points), pci / spci (its
interval), num(d, signed) / nci, p (0.008, <0.001), whole (1,234), sci (1.2e-04).
A template error is one line naming the template (and its line for a syntax error).

    python -m analysis.claims [FILE.md ...]     # default: README.md, experiments/**/README.md,
                                                #   docs/*.md
    python -m analysis.claims --check           # exit 1 where a block differs
"""
from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

import jinja2

from analysis.collect import AnalysisError, read_config
from analysis.tables import baseline_comparisons, fmt, fmt_ci, fmt_p

ROOT = Path(__file__).resolve().parent.parent
BLOCK = re.compile(r"<!-- findings:begin (?P<tpl>\S+) -->\n(?P<body>.*?)<!-- findings:end -->",
                   re.S)


def _num(x, digits: int = 1, signed: bool = False) -> str:
    if x is None:
        raise AnalysisError("a template asked for a quantity that summary.json does not have")
    s = f"{x:+,.{digits}f}" if signed else f"{x:,.{digits}f}"
    return s.lstrip("+-") if float(s.replace(",", "")) == 0 else s


FILTERS = {
    "pct": lambda x: fmt(x, True),                    # 0.265 -> 26.5 (percent or points)
    "spct": lambda x: fmt(x, True, True),             # signed points: +43.0
    "pci": lambda ci: fmt_ci(ci, True),               # [16.4, 39.8]
    "spci": lambda ci: fmt_ci(ci, True, True),        # [+26.8, +59.2]
    "num": _num,                                      # num(2), num(1, true)
    "nci": lambda ci, d=2, sg=False: f"[{_num(ci[0], d, sg)}, {_num(ci[1], d, sg)}]",
    "p": fmt_p,                                       # 0.008, <0.001
    "whole": lambda x: f"{int(round(x)):,}",          # 1234.4 -> 1,234 (Jinja's int stays)
    "sci": lambda x, d=1: f"{x:.{d}e}",               # 0.00012 -> 1.2e-04
}


def experiment_names(exp: Path) -> dict:
    """The names one experiment's templates see (empty when it has no report yet)."""
    summary_file = exp / "results" / "report" / "summary.json"
    if not summary_file.is_file():
        return {}
    s = json.loads(summary_file.read_text())
    spec = exp / "analysis.yaml"
    settings = read_config(spec) if spec.is_file() else {}
    q = {}
    for name, rel in (settings.get("quantities") or {}).items():
        path = exp / rel
        if not path.is_file():
            raise AnalysisError(f"{spec}: quantities.{name}: {rel} does not exist")
        q[name] = json.loads(path.read_text())
    return {"s": s, "cell": {c["label"]: c for c in s["cells"]}, "vs": baseline_comparisons(s),
            "H": {h["name"]: h for h in s.get("hypotheses") or []}, "q": q}


def all_experiments(root: Path = ROOT) -> dict:
    return {d.name: experiment_names(d) for d in sorted((root / "experiments").iterdir())
            if (d / "analysis.yaml").is_file()}


def _env(where: Path) -> jinja2.Environment:
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(where)),
                             undefined=jinja2.StrictUndefined, keep_trailing_newline=True,
                             trim_blocks=True, lstrip_blocks=True, autoescape=False)
    env.filters.update(FILTERS)
    return env


def render_file(md: Path, exps: dict | None = None) -> str:
    """The text of `md` with every findings block rendered from the current summaries."""
    text = md.read_text()
    exps = all_experiments() if exps is None else exps
    names = {"exp": exps, **(exps.get(md.parent.name, {})
                              if (md.parent / "analysis.yaml").is_file() else {})}
    env = _env(md.parent)

    def one(m: re.Match) -> str:
        tpl = m["tpl"]
        try:
            body = env.get_template(tpl).render(**names)
        except jinja2.TemplateNotFound:
            raise AnalysisError(f"{md}: findings template {tpl} does not exist") from None
        except jinja2.TemplateSyntaxError as exc:
            raise AnalysisError(f"{md.parent / tpl}:{exc.lineno}: {exc.message}") from None
        except (jinja2.TemplateError, KeyError, TypeError, ValueError,
                ZeroDivisionError) as exc:
            raise AnalysisError(f"{md.parent / tpl}: {type(exc).__name__}: {exc}") from None
        return f"<!-- findings:begin {tpl} -->\n{body.rstrip()}\n<!-- findings:end -->"
    return BLOCK.sub(one, text)


def default_files(root: Path = ROOT) -> list[Path]:
    return [root / "README.md", root / "experiments" / "README.md",
            *sorted((root / "experiments").glob("*/README.md")),
            *sorted((root / "docs").glob("*.md"))]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m analysis.claims",
                                description=__doc__.split("\n")[0])
    p.add_argument("files", nargs="*", type=Path)
    p.add_argument("--check", action="store_true", help="exit 1 where a block differs")
    args = p.parse_args(argv)
    stale = []
    try:
        exps = all_experiments()
        for md in args.files or default_files():
            new = render_file(md, exps)
            if new != md.read_text():
                stale.append(str(md))
                if not args.check:
                    md.write_text(new)
    except AnalysisError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    verb = "differ from their summaries" if args.check else "rewritten"
    print(f"{len(stale)} file(s) {verb}" + (f": {', '.join(stale)}" if stale else ""))
    return 1 if args.check and stale else 0


if __name__ == "__main__":
    sys.exit(main())
