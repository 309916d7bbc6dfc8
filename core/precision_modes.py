"""The precision modes and what each mode and optimizer keeps per parameter, listed once; torch-free, so the window
can build its menus before torch loads."""

from typing import NamedTuple

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


class ParamBytes(NamedTuple):
    """Bytes a precision mode keeps per parameter for the whole run."""

    weights: int
    grads: int
    master: int = 0  # a float32 copy beside low-precision weights
    state: int = 4  # bytes of a value of a torch optimizer's state (it follows the weights' dtype)


# Autocast (and fp8's Float8Linear, casting per matmul) keeps float32 parameters and gradients; bf16-pure keeps
# weights, gradients and optimizer state in bfloat16 (no float32 master: the step rounds stochastically).
PRECISION_BYTES = {mode: ParamBytes(4, 4) for mode in PRECISION_MODES} | {"bf16-pure": ParamBytes(2, 2, state=2)}


class OptimizerState(NamedTuple):
    """The state an optimizer keeps per trainable parameter: `states` tensors of `state_bytes` bytes each."""

    states: int
    state_bytes: int = 0  # 0: the precision row's `state` (torch's optimizers keep state in the weights' dtype)
    needs_momentum: bool = False  # SGD keeps its buffer only with momentum
    per_tensor: int = 0  # bytes per parameter tensor (Adam's float32 step counter)
    block: int = 0  # values per block sharing a float32 absmax, per state (8-bit state)
    small: int = 0  # a tensor of fewer values keeps 4-byte state (bitsandbytes' min_8bit_size)


OPTIMIZER_STATES = {
    "sgd": OptimizerState(1, needs_momentum=True),  # the momentum buffer
    "adam": OptimizerState(2, per_tensor=4),  # exp_avg, exp_avg_sq
    "adamw": OptimizerState(2, per_tensor=4),
    "adamw8bit": OptimizerState(2, 1, block=256, small=4096),  # uint8 states + absmax (its qmaps are shared)
}


def state_bytes_per_parameter(optimizer: str, momentum: float = 0.9, mode: str = "fp32") -> int:
    """Bytes of state per value of a large tensor (absmax blocks apart)."""
    try:
        row = OPTIMIZER_STATES[optimizer]
    except KeyError:
        raise ValueError(f"unknown optimizer {optimizer!r}") from None
    return 0 if row.needs_momentum and not momentum else row.states * (row.state_bytes or PRECISION_BYTES[mode].state)


def tensor_state_bytes(numel: int, optimizer: str, momentum: float = 0.9, mode: str = "fp32") -> int:
    """Bytes `optimizer`'s state takes for one parameter tensor of `numel` values in `mode` (per-tensor counters
    apart): 8-bit state plus a float32 absmax per block, or 4-byte state for a tensor under `small` values."""
    row, per_value = OPTIMIZER_STATES.get(optimizer), state_bytes_per_parameter(optimizer, momentum, mode)
    if row is None or not row.block or not per_value:
        return numel * per_value
    if numel < row.small:
        return numel * row.states * 4
    return numel * per_value + row.states * 4 * -(-numel // row.block)
