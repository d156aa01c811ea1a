"""`python -m ablate.prime FILE.toml`: a Prime Intellect Lab (`prime rl run`) or prime-rl
TOML file as an ablate cell: run it, print it (`--cfg job`) or write it as an experiment
(`--write conf/experiment/<NAME>.yaml`). The mapping of every key: docs/prime.md."""
