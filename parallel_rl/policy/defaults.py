"""Policy defaults, importable without torch (the coordinator never imports torch)."""
from __future__ import annotations

from easydict import EasyDict


def dqn_default_config() -> EasyDict:
    return EasyDict(
        type="dqn",
        model=dict(hidden_size_list=[128, 128, 64], dueling=True),
        discount_factor=0.99,
        nstep=3,
        learn=dict(
            update_per_collect=4,
            batch_size=64,
            learning_rate=1e-3,
            # hard copy to the target network every N updates (0: use target_theta)
            target_update_freq=100,
            # soft update factor when target_update_freq == 0
            target_theta=0.005,
            double=True,
            max_grad_norm=10.0,
        ),
        collect=dict(n_sample=64),
        eval=dict(),
        other=dict(eps=dict(type="exp", start=0.95, end=0.05, decay=5000)),
    )


POLICY_DEFAULTS = {"dqn": dqn_default_config}
