"""`python -m ablate.progress SWEEP_DIR`: a grid's cells and their state (ablate.apps.progress)."""
from ablate.apps.progress import main

if __name__ == "__main__":
    raise SystemExit(main())
