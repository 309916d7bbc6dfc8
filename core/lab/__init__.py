"""Tools over the engine, shared by the CLI and the window (no Qt): the precision sweep and the dtype
inspector; the LR finder, the batch-size finder, the model summary and the hyper-parameter sweep (trials in
series or in parallel); evaluation and its report; the Predictor, predictions over a file and deployable
exports; TensorBoard event files from a run's metrics.

Sits above core.engine and below core.cli. See docs/ARCHITECTURE.md.
"""
