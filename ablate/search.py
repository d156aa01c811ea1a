"""`python -m ablate.search SPACE.yaml [--trials N] ...`: the Optuna search (ablate.apps.search)."""
from ablate.apps.search import main

if __name__ == "__main__":
    raise SystemExit(main())
