"""The headless command line: one package, `python -m core.cli` (the GUI's child process, torchrun, the sweep).

`main` parses and dispatches; `train`, `lab` and `data` add their subcommands; `torchrun` launches DDP runs.
See docs/ARCHITECTURE.md for where a new command goes.
"""
