"""Tables, statistics, figures and a significance report for ablate sweeps.

    python -m analysis RUN_DIR... --out DIR [--baseline KEY=VAL,...] [--step N]
                       [--B 10000] [--rng-seed 0] [--metric correct] [--include-incomplete]

Modules: collect (find runs, infer factors), estimates (per-question-first point
estimates, behaviour metrics, curves), bootstrap (vectorised two-level bootstrap), stats
(Satterthwaite, Holm, BH, max-|t|, MDE, P(A>B)), compare (contrasts on shared
replicates), summary (summary.json), report, tables, figures, cli.
"""
