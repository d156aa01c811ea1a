"""`python -m ablate.prime FILE.toml [overrides]`: see ablate.prime.cli."""
from ablate.prime.cli import main

if __name__ == "__main__":
    main()
