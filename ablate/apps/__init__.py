"""The top layer: the commands users type (cli: `python -m ablate`; search; progress;
preflight, run by the CLI before any cell directory exists; config_reference, which
writes docs/configuration.md). Nothing in ablate imports an app."""
