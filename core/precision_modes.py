"""The precision modes, listed once; torch-free, so the window can build its menus before torch loads."""

# concrete modes, in the order tables and menus show them; bf16-pure: bf16 weights and optimizer state, rounded
# stochastically; fp8: torchao float8 Linear layers inside bf16 autocast (core.engine.precision)
PRECISION_MODES = ("fp32", "tf32", "fp16", "bf16", "bf16-pure", "fp8")
PRECISION_CHOICES = ("auto", *PRECISION_MODES)  # what a RunConfig may say: `auto` resolves per device
MIXED_MODES = ("fp16", "bf16")  # autocast to a 16-bit dtype: what the dtype inspector is for
# torchao's float8 recipes (RunConfig.fp8_recipe). rowwise_with_gw_hp is refused: it fails inside bf16 autocast,
# which fp8 runs in (pytorch/ao#4616)
FP8_RECIPES = ("tensorwise", "rowwise", "rowwise_with_gw_hp")


def best_mixed_mode(precisions) -> str:
    """The mixed mode to look at on a device that runs `precisions`: bf16, else fp16, else fp32."""
    return next((mode for mode in ("bf16", "fp16") if mode in precisions), "fp32")
