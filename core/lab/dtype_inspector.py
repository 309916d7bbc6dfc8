"""Dtype inspector: one forward + backward pass under a precision mode, recording what ran in which dtype.
Module hooks record each module's input, output, parameter and gradient dtypes; a TorchDispatchMode records every
aten op after autocast chose its dtype, so it sees what really ran and how many casts autocast inserted. Ops outside
any module (usually the loss) are reported as `task.loss`. Why an op ran in float32 comes from AUTOCAST_OP_LISTS,
PyTorch's autocast op reference per device type (torch does not expose the lists).
"""

from __future__ import annotations

import dataclasses
import weakref
from collections import Counter
from dataclasses import dataclass, field

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

from core.config import RunConfig
from core.data.loaders import first_rows
from core.devices import DeviceInfo, device_info, list_devices, torch_device
from core.engine.diagnosis import mismatch_as_device_error
from core.engine.precision import matmul_precision, resolve_precision
from core.engine.run_state import seed_everything
from core.tasks import create_task
from core.tasks.task_checks import build_checked, check_returns, load_checked, user_code_errors

LOSS_ROW = "task.loss"
_CONTEXT = " in the dtype inspector"  # an exception of the task's code: 'KeyError in the dtype inspector: ...'


def _ops(names: str) -> set[str]:
    return set(names.split())


# Ops that only reshape, alias or detach: they carry their input's dtype and would drown the real compute ops.
_LAYOUT_OPS = _ops(
    "detach t view _unsafe_view expand permute transpose reshape alias slice select unsqueeze squeeze "
    "as_strided unbind split split_with_sizes chunk narrow lift_fresh clone contiguous empty_like zeros_like "
    "ones_like new_empty new_zeros copy_"
)
_CAST_OPS = {"_to_copy", "to", "_autocast_to_reduced_precision", "_autocast_to_full_precision"}


# Per PyTorch's autocast op reference (names as in the reference; see _REFERENCE_NAME for the aten names the
# recorder sees). MPS and XPU follow the CUDA lists.
_CUDA_LISTS = {
    "lower": _ops(
        "addbmm addmm addmv addr baddbmm bmm chain_matmul multi_dot conv1d conv2d conv3d conv_transpose1d "
        "conv_transpose2d conv_transpose3d convolution GRUCell linear LSTMCell matmul mm mv prelu RNNCell "
        "scaled_dot_product_attention"
    ),
    "fp32": _ops(
        "pow acos asin binary_cross_entropy_with_logits cosh cosine_embedding_loss cdist cosine_similarity "
        "cross_entropy cumprod cumsum dist erfinv exp expm1 group_norm hinge_embedding_loss kl_div l1_loss "
        "layer_norm log log_softmax log10 log1p log2 logsumexp margin_ranking_loss mse_loss "
        "multilabel_margin_loss multi_margin_loss nll_loss norm normalize pdist poisson_nll_loss prod "
        "reciprocal rms_norm rsqrt sinh smooth_l1_loss soft_margin_loss softmax softmin softplus sum renorm tan "
        "triplet_margin_loss"
    ),
    "promote": _ops("addcdiv addcmul atan2 bilinear cross dot grid_sample index_put scatter_add tensordot"),
}
AUTOCAST_OP_LISTS: dict[str, dict[str, set[str]]] = {
    "cuda": _CUDA_LISTS,
    "mps": _CUDA_LISTS,
    "xpu": _CUDA_LISTS,
    "cpu": {
        "lower": _ops(
            "conv1d conv2d conv3d bmm mm linalg_vecdot baddbmm addmm addbmm linear convolution matmul conv_tbc "
            "conv_transpose1d conv_transpose2d conv_transpose3d prelu scaled_dot_product_attention "
            "_native_multi_head_attention"
        ),
        "fp32": _ops(
            "avg_pool3d binary_cross_entropy grid_sampler polar prod quantile nanquantile stft cdist trace "
            "view_as_complex cholesky cholesky_inverse cholesky_solve inverse lu_solve orgqr ormqr pinverse "
            "max_pool3d max_unpool2d max_unpool3d adaptive_avg_pool3d reflection_pad1d reflection_pad2d "
            "replication_pad1d replication_pad2d replication_pad3d mse_loss cosine_embedding_loss nll_loss "
            "nll_loss2d hinge_embedding_loss poisson_nll_loss cross_entropy smooth_l1_loss l1_loss huber_loss "
            "margin_ranking_loss soft_margin_loss triplet_margin_loss multi_margin_loss ctc_loss kl_div "
            "multilabel_margin_loss binary_cross_entropy_with_logits"
        ),
        "promote": {"stack", "cat", "index_copy"},
    },
}
# Ops with no lower-precision path: they run in their parameter's (Embedding) or input's (Dropout) dtype.
_NO_LOWER_PATH = {"embedding", "embedding_bag", "dropout"}
_NO_LOWER_PATH_MODULES = {"Embedding", "EmbeddingBag", "Dropout", "Dropout1d", "Dropout2d", "Dropout3d", "AlphaDropout"}
# An op's name in the op reference -> the aten ops the recorder sees for it.
_ATEN_OPS = {
    "layer_norm": ("native_layer_norm",),
    "softmax": ("_softmax", "_safe_softmax"),
    "log_softmax": ("_log_softmax",),
    "nll_loss": ("nll_loss_forward",),
    "nll_loss2d": ("nll_loss2d_forward",),
    "dropout": ("native_dropout", "bernoulli_", "bernoulli"),
    "embedding_bag": ("_embedding_bag", "_embedding_bag_forward_only"),
    "group_norm": ("native_group_norm",),
    "rms_norm": ("_fused_rms_norm",),
    "to": ("_to_copy",),
    "scaled_dot_product_attention": (
        "_scaled_dot_product_flash_attention",
        "_scaled_dot_product_flash_attention_for_cpu",
        "_scaled_dot_product_efficient_attention",
        "_scaled_dot_product_cudnn_attention",
    ),
}
_REFERENCE_NAME = {op: name for name, ops in _ATEN_OPS.items() for op in ops}  # aten op -> reference name
_FACTORY_OPS = _ops(
    "zeros ones full full_like scalar_tensor arange empty rand randn randint new_full new_ones eye linspace"
)
# The short reason of an op that ran in float32 under each autocast rule but 'none' (see why_float32).
_RULE_WHY = {
    "fp32": "fp32 list",
    "promote": "promote",
    "no lower-precision path": "no lower-precision path",
    "lower": "inside a float32 op",
}
# Short reasons (ModuleDtypes.why values) and what each means.
WHY_TEXT = {
    "fp32 list": "on autocast's float32 list for this device: autocast runs it in float32 whatever its inputs",
    "promote": "a 'promote' op: autocast runs it in the widest input type, and one input was float32",
    "no lower-precision path": "no autocast rule and no lower-precision path (Embedding, Dropout): it runs in "
    "its parameter's or input's dtype, float32 here",
    "input float32": "on no autocast list: it runs in its input's dtype, and its input was already float32 "
    "(e.g. the output of an Embedding, a float32-list op or a residual sum)",
    "mixed inputs": "on no autocast list: its inputs mixed float32 with a lower precision, and type promotion "
    "picks float32",
    "new tensor": "creates a tensor in the default dtype, float32 (autocast does not change factories)",
    "cast to float32": "on no autocast list, and its input was cast up to float32 just before: by autocast for "
    "a float32-list op that calls it (e.g. cross_entropy), or by the model's own .float()",
    "inside a float32 op": "on the lower-precision list, but called from inside another op that computes in "
    "float32 (e.g. attention's math path); autocast casts only the op the model calls",
}


def autocast_rule(op: str, device_type: str) -> str:
    """Which autocast rule covers `op` on `device_type`: 'lower', 'fp32', 'promote', 'no lower-precision path'
    or 'none' (runs in its input's dtype)."""
    name = _REFERENCE_NAME.get(op, op)  # 'native_layer_norm' -> 'layer_norm'
    lists = AUTOCAST_OP_LISTS.get(device_type, _CUDA_LISTS)
    for rule in ("lower", "fp32", "promote"):
        if name in lists[rule]:
            return rule
    return "no lower-precision path" if name in _NO_LOWER_PATH else "none"


def why_float32(op: str, device_type: str, input_dtypes: list[str], input_was_cast: bool = False) -> str:
    """The short reason (a WHY_TEXT key) an op ran in float32 while autocast computes in a lower precision."""
    rule = autocast_rule(op, device_type)
    if rule != "none":
        return _RULE_WHY[rule]
    floats = set(input_dtypes)
    if input_was_cast and floats == {"float32"}:
        return "cast to float32"
    if not floats:
        return "new tensor" if op in _FACTORY_OPS else "input float32"
    return "mixed inputs" if len(floats) > 1 else "input float32"


def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def _tensor_dtypes(value) -> list[str]:
    return [_dtype_name(t.dtype) for t in tree_leaves(value) if isinstance(t, torch.Tensor)]


@dataclass
class ModuleDtypes:
    """Dtypes seen by one module (or the `task.loss` pseudo-module) during the inspected step."""

    name: str
    type: str
    depth: int
    input_dtypes: list[str] = field(default_factory=list)
    output_dtypes: list[str] = field(default_factory=list)
    param_dtypes: list[str] = field(default_factory=list)
    grad_dtypes: list[str] = field(default_factory=list)
    output_grad_dtypes: list[str] = field(default_factory=list)
    ops: dict[str, str] = field(default_factory=dict)
    fp32_ops: list[str] = field(default_factory=list)
    why: dict[str, str] = field(default_factory=dict)  # fp32 op -> short reason (a WHY_TEXT key)
    casts: int = 0
    kept_fp32: bool = False
    called: bool = False


@dataclass
class InspectionResult:
    """Per-module dtypes of one step of a task under one precision mode."""

    task: str
    precision: str
    device: str
    autocast_dtype: str | None
    loss_dtype: str
    rows: list[ModuleDtypes]
    device_type: str = "cpu"

    def reasons(self) -> dict[str, str]:
        """Every short reason used in this result -> what it means (for a legend under the table)."""
        used = dict.fromkeys(reason for r in self.rows for reason in r.why.values())
        return {reason: WHY_TEXT[reason] for reason in used}

    def row(self, name: str) -> ModuleDtypes:
        """The row of the module called `name` (as in named_modules, `task.loss` for the loss)."""
        return next(r for r in self.rows if r.name == name)

    def kept_fp32(self) -> list[str]:
        """Modules autocast left in float32 although it computes in a lower precision."""
        return [r.name for r in self.rows if r.kept_fp32]

    def to_dict(self) -> dict:
        """Plain JSON-ready dict (the `inspect --json` schema)."""
        return dataclasses.asdict(self)


class _OpRecorder(TorchDispatchMode):
    """Attributes every aten op to the innermost running module and notes the dtypes it produced."""

    def __init__(self, stack: list[ModuleDtypes], loss_row: ModuleDtypes, low_precision: bool, device_type: str):
        super().__init__()
        self.device_type = device_type
        self.stack = stack
        self.loss_row = loss_row
        self.low_precision = low_precision
        self.forward = True
        # float32 tensors made by a cast (id -> weak reference): why the next op ran in float32
        self.cast_up: dict[int, weakref.ref] = {}

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if not self.forward:
            return out
        row = self.stack[-1] if self.stack else self.loss_row
        name = func.overloadpacket.__name__
        if name in _CAST_OPS:
            row.casts += 1
            if isinstance(out, torch.Tensor) and out.dtype == torch.float32:
                self.cast_up[id(out)] = weakref.ref(out)
        elif name not in _LAYOUT_OPS:
            dtypes = _tensor_dtypes(out)
            if dtypes:
                row.ops[name] = dtypes[0]
                if self.low_precision and dtypes[0] == "float32" and name not in row.fp32_ops:
                    row.fp32_ops.append(name)
                    tensors = [t for t in tree_leaves((args, kwargs)) if isinstance(t, torch.Tensor)]
                    inputs = [_dtype_name(t.dtype) for t in tensors if t.is_floating_point()]
                    cast = any((ref := self.cast_up.get(id(t))) is not None and ref() is t for t in tensors)
                    no_path = row.type in _NO_LOWER_PATH_MODULES  # e.g. Dropout's mask multiply
                    row.why[name] = (
                        "no lower-precision path" if no_path else why_float32(name, self.device_type, inputs, cast)
                    )
        return out


def _step(task, model, batch: dict, plan, device: torch.device, recorder: _OpRecorder) -> torch.Tensor:
    """The recorded forward (under autocast) and backward; a device mismatch of the task's code as one line."""
    with mismatch_as_device_error(model, batch, device), matmul_precision(plan), recorder:
        with plan.autocast():  # forward + loss only, as in the training step
            loss = task.loss(model, batch)
        recorder.forward = False
        plan.make_scaler().scale(loss).backward()
    return loss


def inspect_dtypes(
    config: RunConfig, devices: list[DeviceInfo] | None = None, batch_size: int | None = None
) -> InspectionResult:
    """Build the task of `config` like the trainer does and run one forward + backward in its precision, on the training
    split's first rows (`batch_size`: default the config's, at most 64). A user task's returns are checked first; its
    code's exception is a UserCodeError, a device mismatch a DeviceError."""
    cfg = config.validate()
    info = device_info(cfg.device, devices if devices is not None else list_devices())
    device = torch_device(info)
    plan = resolve_precision(cfg.precision, info)
    task = create_task(cfg.task, cfg.task_options)
    seed_everything(cfg.seed)
    data = load_checked(task, cfg, _CONTEXT)
    seed_everything(cfg.seed)
    model = build_checked(task, data.info, _CONTEXT).to(device)
    model.train()
    size = batch_size or min(cfg.batch_size, 64)
    check_returns(task, model, data, device, plan.autocast, size)  # as a run checks them before its first step
    batch = first_rows(data.train, size, device)  # a Dataset's first items collated, as a batch of the run

    rows = {
        module: ModuleDtypes(name or "(model)", type(module).__name__, name.count(".") + 1 if name else 0)
        for name, module in model.named_modules()
    }
    loss_row = ModuleDtypes(name=LOSS_ROW, type="loss", depth=0)
    stack: list[ModuleDtypes] = []
    low_precision = plan.autocast_dtype is not None

    def pre_hook(module, args, kwargs):
        stack.append(rows[module])

    def post_hook(module, args, kwargs, output):
        row = stack.pop()
        row.called = True
        row.input_dtypes = row.input_dtypes or _tensor_dtypes((args, kwargs))
        row.output_dtypes = row.output_dtypes or _tensor_dtypes(output)
        floats = [d for d in row.output_dtypes if d.startswith(("float", "bfloat"))]
        row.kept_fp32 = row.kept_fp32 or (low_precision and bool(floats) and all(d == "float32" for d in floats))
        for tensor in tree_leaves(output):
            if isinstance(tensor, torch.Tensor) and tensor.requires_grad:
                tensor.register_hook(lambda grad, row=row: row.output_grad_dtypes.append(_dtype_name(grad.dtype)))

    handles = []
    for module in rows:
        handles.append(module.register_forward_pre_hook(pre_hook, with_kwargs=True))
        handles.append(module.register_forward_hook(post_hook, with_kwargs=True))
    recorder = _OpRecorder(stack, loss_row, low_precision, device.type)
    try:
        with user_code_errors(_CONTEXT):
            loss = _step(task, model, batch, plan, device, recorder)
    finally:
        for handle in handles:
            handle.remove()

    loss_row.called = True
    loss_row.output_dtypes = [_dtype_name(loss.dtype)]
    loss_row.kept_fp32 = low_precision and loss.dtype == torch.float32
    for module, row in rows.items():
        own = list(module.parameters(recurse=False))
        row.param_dtypes = sorted({_dtype_name(p.dtype) for p in own})
        row.grad_dtypes = sorted({_dtype_name(p.grad.dtype) for p in own if p.grad is not None})
        row.output_grad_dtypes = sorted(set(row.output_grad_dtypes))
    ordered = [row for row in rows.values() if row.called] + [loss_row]
    return InspectionResult(
        task=cfg.task,
        precision=plan.mode,
        device=info.id,
        autocast_dtype=plan.compute_dtype_name if low_precision else None,
        loss_dtype=_dtype_name(loss.dtype),
        rows=ordered,
        device_type=device.type,
    )


def summarize(result: InspectionResult) -> dict[str, int]:
    """How many modules produced each output dtype (the one-line answer to 'what runs in half precision?')."""
    counts: Counter[str] = Counter()
    for row in result.rows:
        if row.output_dtypes:
            counts[row.output_dtypes[0]] += 1
    return dict(counts)
