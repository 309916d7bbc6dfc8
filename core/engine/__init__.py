"""The training engine: the Trainer and what one run is made of (precision, optimizers, step metrics, AMP health,
checkpoints and run state, DDP, control, evaluation, events and reporting, diagnosis, the run folder and history).
Imports only core's lower layers (config, tasks, data, leaves). See docs/ARCHITECTURE.md.
"""
