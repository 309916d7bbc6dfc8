"""`amp-console export RUN_OR_CHECKPOINT --format program|onnx|safetensors --out FOLDER`: a deployable export
(core.runs.export), verified by reloading it. The checkpoint is chosen as `evaluate` and `predict` choose it (a run's
best by default). No torch at import time.
"""

from __future__ import annotations

import json
import sys

from core.cli.common import add_checkpoint_args


def register(sub) -> None:
    p = sub.add_parser(
        "export",
        help="a deployable export of a run's model (torch.export program, ONNX or "
        "safetensors) with its manifest and a standalone serve.py",
        description="Write FOLDER with the model file, manifest.json (what the model takes and "
        "returns, and what serving needs: the recommender's lesson ids, the sentiment "
        "tokenizer, the ranking feature order) and serve.py (stdlib + torch; "
        "onnxruntime for ONNX). The export is loaded back and compared with the "
        "trained model on a sample batch before it is kept.",
    )
    add_checkpoint_args(p)
    p.add_argument(
        "--format",
        default="program",
        metavar="FORMAT",
        help="program (torch.export .pt2, the default), onnx (needs the onnx extra) or safetensors "
        "(weights, with today's checkpoint export files)",
    )
    p.add_argument("--out", required=True, metavar="FOLDER", help="the folder to write (must not exist, or be empty)")
    p.add_argument(
        "--dtype",
        default="fp32",
        metavar="DTYPE",
        help="weights in fp32 (default), bf16 or fp16; inputs and outputs stay float32; the file size "
        "and the output difference against fp32 are reported",
    )
    p.add_argument("--json", action="store_true", help="last stdout line: one JSON object")
    p.set_defaults(handler=cmd_export)


def cmd_export(args) -> int:
    from core.cli.evaluate import chosen_checkpoint  # a run's best by default, else its last
    from core.runs.export import export_model

    checkpoint = chosen_checkpoint(args, "exporting")
    sys.stderr.write(f"exporting {checkpoint} as {args.format} ({args.dtype})…\n")
    result = export_model(
        checkpoint, args.out, args.format, args.dtype, progress=lambda line: sys.stderr.write(line + "\n")
    )
    if args.json:
        print(json.dumps(result.to_dict()))
    else:
        print(result.summary())
    return 0
