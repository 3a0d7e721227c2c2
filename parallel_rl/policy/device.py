"""Where a learner trains: ``policy.device`` ("cpu" | "cuda" | "auto") or DI-engine's ``policy.cuda``.

Resolved once, before any process starts (:func:`parallel_rl.envs.fit.check_env_fits`)
and again where the policy builds its networks. Collectors always act on the CPU;
checkpoints on the shared disk always hold CPU tensors.
"""

from __future__ import annotations

from ..errors import ConfigError

DEVICES = ("", "cpu", "cuda", "auto")


def resolve_device(policy_cfg) -> str:
    """``"cpu"`` or ``"cuda"``; CUDA asked for where none is present raises ConfigError naming the key."""
    device = policy_cfg.get("device", "")
    if device not in DEVICES:
        raise ConfigError(f"policy.device must be one of 'cpu', 'cuda', 'auto', got {device!r}")
    if device == "cpu" or (device == "" and not policy_cfg.get("cuda", False)):
        return "cpu"
    import torch

    available = torch.cuda.is_available()
    if device == "auto":
        return "cuda" if available else "cpu"
    if not available:
        key = "policy.device='cuda'" if device == "cuda" else "policy.cuda=True"
        raise ConfigError(
            f"{key} but torch sees no CUDA device on this machine; set policy.device='cpu' "
            f"(or 'auto'), or run on a machine with a GPU"
        )
    return "cuda"
