"""The precision lab and tuning, shared by the CLI and the window (no Qt): precision sweep, dtype inspector, LR finder,
batch-size finder, model summary and hyperparameter sweep. Above core.engine, below core.runs.
"""
