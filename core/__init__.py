"""AMP Console engine: a plain PyTorch library (no Qt) for device-agnostic mixed-precision training.

Layers (cli > lab > engine > config > tasks > data > leaves) and the rules of the hot loop:
docs/ARCHITECTURE.md.
"""

__version__ = "0.1.0"
