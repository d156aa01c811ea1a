"""`python -m ablate [overrides]`: see ablate.apps.cli."""
from ablate.apps.cli import main

if __name__ == "__main__":
    main()
