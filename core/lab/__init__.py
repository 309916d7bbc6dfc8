"""The precision lab and tuning, shared by the CLI and the window (no Qt): the precision sweep and the dtype
inspector; the LR finder, the batch-size finder, the model summary and the hyper-parameter sweep (trials in
series or in parallel). What is done with a finished run (evaluate, predict, export, serve, compare) is
core.runs'.

Sits above core.engine and below core.runs. See docs/ARCHITECTURE.md.
"""
