"""`python -m ablate.apps.check [overrides]`: the preflight of `python -m ablate` alone.

Every job of the command line (each cell of a -m grid) is composed and put through every
check `python -m ablate` makes before any work (ablate.apps.cli.preflight: the config,
the environment built and its conformance episode played, the model's files, the memory
plan, the output directory and its free space); then exit 0 with one line saying so, or
2 with the one line naming what to fix. No model is loaded, no cell is run and no
directory is made (`--cfg job` prints the composed config without any check)."""
from __future__ import annotations

import sys

from ablate.apps.cli import PLANNED, checked


def main(argv: list[str] | None = None) -> int:
    _, code = checked(argv)
    if code == 0:
        jobs = PLANNED.get("jobs", 0)
        print(f"ablate: preflight passed: {jobs} job(s) composed and checked; nothing was "
              "run (python -m ablate with the same arguments runs them)")
    return code


if __name__ == "__main__":
    sys.exit(main())
