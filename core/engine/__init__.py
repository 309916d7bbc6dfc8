"""The training engine: the Trainer and what one run is made of (precision plan, optimizers, step metrics,
AMP health, checkpoints and run state, DDP, stop/pause control, evaluation, events and reporting, failure
diagnosis).

Imports only core's lower layers (config, tasks, data, leaves). See docs/ARCHITECTURE.md.
"""
