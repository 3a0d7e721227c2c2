"""``parallel-rl export``: the acting module (observation normalisation included) as one standalone file.

TorchScript (``torch.jit.trace``: ``torch.jit.load(path)(obs)`` needs only torch) or ONNX (opset 17, a
dynamic batch axis; runs in ONNX Runtime). Both carry ``obs_shape``, ``obs_dtype`` and ``action_kind`` as
metadata, so :func:`parallel_rl.load_policy` can run them without the config. A pixel policy takes the env's own
observations: uint8 frames (scaled by 1/255 inside, as in training) or bool boards, not float32.

A policy with memory exports as ``(obs, hidden_h[, hidden_c]) -> (action, next_hidden_h[, next_hidden_c])``
(ONNX input and output names as written; each state (N, H) float32, zeros at an episode's start, fed back
every step); its metadata's ``state`` gives the parts and their H."""
from __future__ import annotations

import json
import logging
import os
from typing import Tuple

import numpy as np
import torch
from torch import nn

from ..errors import ConfigError

logger = logging.getLogger(__name__)

FORMATS = ("torchscript", "onnx")
META_KEY = "parallel_rl"  # TorchScript extra file / ONNX metadata key holding the JSON metadata
ONNX_OPSET = 17


def export_acting(module: nn.Module, obs_shape: Tuple[int, ...], action_kind: str, fmt: str, path: str,
                  obs_dtype: str = "float32") -> str:
    """Write ``module`` (batch of ``obs_dtype`` observations, the env's: float32, uint8 or bool -> actions) to
    ``path`` in ``fmt``; returns the path."""
    if fmt not in FORMATS:
        raise ConfigError(f"--format must be one of {', '.join(FORMATS)}, got {fmt!r}")
    obs_dtype = np.dtype(obs_dtype).name
    state = dict(getattr(module, "state_sizes", None) or {})
    meta = json.dumps({"obs_shape": list(obs_shape), "obs_dtype": obs_dtype, "action_kind": action_kind,
                       "format": fmt, **({"state": state} if state else {})})
    example = (torch.from_numpy(np.zeros((2, *obs_shape), dtype=obs_dtype)),
               *(torch.zeros((2, n), dtype=torch.float32) for n in state.values()))
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with torch.no_grad():
        if fmt == "torchscript":
            traced = torch.jit.trace(module, example, check_trace=False)
            torch.jit.save(traced, path, _extra_files={META_KEY: meta})
        else:
            _export_onnx(module, example, path, meta, list(state))
    return path


def _export_onnx(module: nn.Module, example: tuple, path: str, meta: str, state: list) -> None:
    try:
        import onnx
    except ImportError:
        raise ConfigError("--format onnx needs the onnx package: pip install 'parallel_rl[export]' "
                          "(onnx, onnxscript; onnxruntime to run the file)") from None
    inputs, outputs = ["obs", *state], ["action", *(f"next_{k}" for k in state)]
    torch.onnx.export(module, example, path, input_names=inputs, output_names=outputs,
                      dynamic_axes={name: {0: "batch"} for name in inputs + outputs}, opset_version=ONNX_OPSET,
                      dynamo=False)
    model = onnx.load(path)
    entry = model.metadata_props.add()
    entry.key, entry.value = META_KEY, meta
    onnx.save(model, path)


def read_metadata(path: str) -> dict:
    """The metadata of an exported file (TorchScript or ONNX); {} when it has none."""
    if path.endswith(".onnx"):
        import onnx

        props = {p.key: p.value for p in onnx.load(path, load_external_data=False).metadata_props}
        return json.loads(props.get(META_KEY, "{}"))
    extra = {META_KEY: ""}
    torch.jit.load(path, map_location="cpu", _extra_files=extra)
    return json.loads(extra[META_KEY] or "{}")
