"""AMP Console engine: a plain PyTorch library (no Qt) for device-agnostic mixed-precision training."""

__version__ = "0.1.0"
