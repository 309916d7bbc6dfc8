"""The precision modes, listed once: every other module (engine, CLI, form, sweep, inspector) imports them.

A torch-free leaf, so the window can build its menus before torch is imported. See docs/ARCHITECTURE.md.
"""

PRECISION_MODES = ("fp32", "tf32", "fp16", "bf16")  # concrete modes, in the order tables and menus show them
PRECISION_CHOICES = ("auto", *PRECISION_MODES)  # what a RunConfig may say: `auto` resolves per device
