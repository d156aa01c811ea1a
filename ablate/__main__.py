"""`python -m ablate [overrides]`: see ablate.cli."""
from ablate.cli import main

if __name__ == "__main__":
    main()
