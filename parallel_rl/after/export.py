"""``parallel-rl export``: the acting module (observation normalisation included) as one standalone file.

TorchScript (``torch.jit.trace``: ``torch.jit.load(path)(obs)`` needs only torch) or ONNX (opset 17, a
dynamic batch axis; runs in ONNX Runtime). Both carry ``obs_shape``, ``obs_dtype`` and ``action_kind`` as
metadata, so :func:`parallel_rl.load_policy` can run them without the config. A pixel policy takes the env's own
observations: uint8 frames (scaled by 1/255 inside, as in training) or bool boards, not float32.

A policy with memory exports as ``(obs, hidden_h[, hidden_c]) -> (action, next_hidden_h[, next_hidden_c])``
(ONNX input and output names as written; each state (N, H) float32, zeros at an episode's start, fed back
every step); its metadata's ``state`` gives the parts and their H.

An export's kind is its suffix (:data:`SUFFIXES`: ``.torchscript``, ``.onnx``), never what is inside: a TorchScript
file is a program (its code runs while it loads), so :func:`parallel_rl.load_policy` runs one only when it is named
so or its caller says so, and never a checkpoint's ``.pt``."""

from __future__ import annotations

import json
import logging
import os
from typing import Any, Callable, Optional, Tuple

import numpy as np
import torch
from torch import nn

from ..errors import ConfigError

logger = logging.getLogger(__name__)

FORMATS = ("torchscript", "onnx")
# each format's own suffix: what export_acting writes and load_policy goes by (a checkpoint is a .pt)
SUFFIXES = {"torchscript": ".torchscript", "onnx": ".onnx"}
META_KEY = "parallel_rl"  # TorchScript extra file / ONNX metadata key holding the JSON metadata
ONNX_OPSET = 17


def export_acting(
    module: nn.Module, obs_shape: Tuple[int, ...], action_kind: str, fmt: str, path: str, obs_dtype: str = "float32"
) -> str:
    """Write ``module`` (batch of ``obs_dtype`` observations, the env's: float32, uint8 or bool -> actions) to
    ``path`` in ``fmt``; returns the path."""
    if fmt not in FORMATS:
        raise ConfigError(f"--format must be one of {', '.join(FORMATS)}, got {fmt!r}")
    suffix = SUFFIXES[fmt]
    if not path.endswith(suffix):
        raise ConfigError(
            f"-o {path!r}: name a {fmt} export *{suffix} (load_policy tells an export from a checkpoint "
            f"by its suffix); use -o {os.path.splitext(path)[0] + suffix!r}"
        )
    obs_dtype = np.dtype(obs_dtype).name
    state = dict(getattr(module, "state_sizes", None) or {})
    meta = json.dumps(
        {
            "obs_shape": list(obs_shape),
            "obs_dtype": obs_dtype,
            "action_kind": action_kind,
            "format": fmt,
            **({"state": state} if state else {}),
        }
    )
    example = (
        torch.from_numpy(np.zeros((2, *obs_shape), dtype=obs_dtype)),
        *(torch.zeros((2, n), dtype=torch.float32) for n in state.values()),
    )
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
        raise ConfigError(
            "--format onnx needs the onnx package: pip install 'parallel_rl[export]' "
            "(onnx, onnxscript; onnxruntime to run the file)"
        ) from None
    inputs, outputs = ["obs", *state], ["action", *(f"next_{k}" for k in state)]
    torch.onnx.export(
        module,
        example,
        path,
        input_names=inputs,
        output_names=outputs,
        dynamic_axes={name: {0: "batch"} for name in inputs + outputs},
        opset_version=ONNX_OPSET,
        dynamo=False,
    )
    model = onnx.load(path)
    entry = model.metadata_props.add()
    entry.key, entry.value = META_KEY, meta
    onnx.save(model, path)


def export_kind(path: str) -> Optional[str]:
    """The format whose suffix ``path`` has (:data:`SUFFIXES`); None for any other name (a checkpoint, a run)."""
    return next((fmt for fmt, suffix in SUFFIXES.items() if path.endswith(suffix)), None)


def open_export(path: str, kind: str) -> Tuple[Callable[..., Any], dict]:
    """(forward, metadata) of the ``kind`` export at ``path``: ``forward`` runs it on numpy batches (ONNX Runtime,
    or torch for TorchScript, whose code runs as it loads: call this only for a file its owner named as one).
    ConfigError in one line when it is damaged or not written by ``parallel-rl export``."""
    if kind == "onnx":
        try:
            import onnx
            import onnxruntime
        except ImportError:
            raise ConfigError(
                "running an .onnx policy needs onnx and onnxruntime: pip install onnx onnxruntime"
            ) from None
    try:
        if kind == "onnx":
            props = {p.key: p.value for p in onnx.load(path, load_external_data=False).metadata_props}
            meta = _metadata(path, props.get(META_KEY))
            session = onnxruntime.InferenceSession(path, providers=["CPUExecutionProvider"])
            names = ["obs", *meta.get("state", {})]

            def forward(obs, *state):
                out = session.run(None, dict(zip(names, (obs, *state))))
                return tuple(out) if state else out[0]

            return forward, meta
        from .acting import torch_forward

        extra = {META_KEY: ""}
        module = torch.jit.load(path, map_location="cpu", _extra_files=extra)
        return torch_forward(module), _metadata(path, extra[META_KEY])
    except ConfigError:
        raise
    except Exception as exc:  # onnx, onnxruntime and torch raise many types for a damaged file
        first = (str(exc).strip().splitlines() or [""])[0][:200]
        raise ConfigError(
            f"{path}: not a loadable {kind} export ({type(exc).__name__}: {first}); export it again "
            f"with parallel-rl export"
        ) from None


def _metadata(path: str, text: Optional[str]) -> dict:
    """The export's metadata (``obs_shape``, ``obs_dtype``, ``action_kind``[, ``state``]), checked."""
    meta = json.loads(text) if text else None
    if not isinstance(meta, dict):
        raise ConfigError(f"{path}: not written by parallel-rl export (no metadata)")
    try:
        shape = tuple(int(n) for n in meta["obs_shape"])
        np.dtype(meta.get("obs_dtype", "float32"))
        state = {str(k): int(v) for k, v in dict(meta.get("state") or {}).items()}
        ok = isinstance(meta["action_kind"], str)
    except (KeyError, TypeError, ValueError):
        ok = False
    if not ok:
        raise ConfigError(f"{path}: its parallel-rl metadata is damaged ({json.dumps(meta)[:200]}); export it again")
    return {**meta, "obs_shape": shape, "state": state}
