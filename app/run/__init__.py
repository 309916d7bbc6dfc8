"""Work off the GUI thread: training runs and background jobs.

- `handle.RunHandle`: the one interface a training run offers the window (start, pause, resume, stop,
  shutdown; `event`, `setupFailed`, `finished` signals). `ThreadRun` (core's Trainer on a QThread of this
  process) and `ProcessRun` (a `python -m core.cli train` child, or torchrun) implement it.
- `controller.RunController`: owns the one run at a time (and a training process started ahead of time),
  forwards its events, and joins it before anything is destroyed. It never asks which kind of run it holds.
- `jobs.BackgroundJob`: the one way to run a plain function on a QThread (runs on a thread, the precision
  sweep, the dtype inspector); `jobs.JobRunner` runs several short ones (load, export) with callbacks.

See docs/ARCHITECTURE.md.
"""
