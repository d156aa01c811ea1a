"""Tables, statistics, figures and a significance report for ablate sweeps.

    python -m analysis RUN_DIR... --out DIR --baseline KEY=VAL,... [--sesoi 0.03]
                       [--all-pairs] [--step N] [--metric correct] [--spec analysis.yaml]
                       [--B 10000] [--rng-seed 0] [--include-incomplete]
                       [--allow-duplicates]

Modules: collect (find runs, infer factors), estimates (per-question means, behaviour
metrics), world (a run's environment.json: its breakdown label and own behaviour
columns), stats (variance components of the crossed seeds x questions design, t
intervals, verdicts, Holm/BH, planning), compare (contrasts on shared questions,
simultaneous intervals), calibration (simulation study), labels, lifelong (the curves of
skill-library cells: library, skills used, held-out solve rate, forgetting), summary
(summary.json),
report, tables, figures, cli. Methods: docs/statistics.md.
"""
