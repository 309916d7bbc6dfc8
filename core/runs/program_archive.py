"""What may be in a torch.export program (`model.pt2`) before torch.export.load reads it.

torch.export.load runs code from the archive in several places, so a program export is code, not data. The
archive (torch 2.13, torch/export/pt2_archive) is a zip whose members lie under one root folder:

- `archive_format` ("pt2"), `archive_version`, `byteorder`, `.data/version`, `.data/serialization_id`: text;
- `models/<m>.json`: the graph. torch runs two of its fields as Python: `guards_code` (compiled into a guard
  function by `.module()`) and every shape expression `expr_str` (parsed by sympy.sympify, which is eval);
- `data/weights/<m>_weights_config.json`, `data/constants/<m>_constants_config.json`: per tensor its member
  and `use_pickle`: false is raw bytes (read as a storage, never unpickled), true is torch.load(weights_only=False);
- pickles: `data/weights/<m>.pt` and `data/constants/<m>.pt` (the legacy layout, unpickled through torch.load's
  fallback to weights_only=False), constants `custom_obj_*` (TorchScript pickle) and `opaque_obj_*`
  (pickle.loads), `data/sample_inputs/<m>.pt` (torch.save of the example inputs, empty when there are none);
- `data/aotinductor/` (compiled shared libraries), `extra/` and the rest: not part of an export.

`check_program` allows what a program written by `amp-console export` holds and nothing else: the text members,
the graph JSON without guard code and with shape expressions of sympy constructors over numbers and names only,
configs whose every entry is raw (`use_pickle` false, a member of its folder), raw tensor members, and empty
sample inputs. Any other member is refused, and so is one whose bytes are a pickle (a \\x80 protocol opcode) or a
torch.save archive whatever its name. The zip is only listed and its small members read (bounded): nothing is
extracted; names with `..`, absolute or odd names, duplicates and links are refused.

The checks are written once, in core/runs/serve_program.py, which every export carries beside its serve.py
(core/runs/serve.py, standard library only, it imports nothing of this project) and serve.py loads for a
program; this module names serve.py's for the project:
core.runs.export checks each program it writes with the same code before verifying it.
"""

from __future__ import annotations

from core.runs.serve import (
    UnsafeExport,
    check_program,
    load_program,
    model_file,
    open_regular,
)
from core.runs.serve_program import PT2_JSON_LIMIT, PT2_MEMBERS_LIMIT

__all__ = [
    "PT2_JSON_LIMIT",
    "PT2_MEMBERS_LIMIT",
    "UnsafeExport",
    "check_program",
    "load_program",
    "model_file",
    "open_regular",
]
