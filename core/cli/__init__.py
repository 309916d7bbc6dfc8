"""The headless command line, `python -m core.cli`: `main` parses and dispatches, the other modules add subcommands;
`torchrun` launches DDP runs.
"""
