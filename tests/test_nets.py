"""policy.model.encoder: the conv stack over (H, W, C) observations, shared by DQN and PPO."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from parallel_rl.config import compile_config
from parallel_rl.envs.spaces import ActionSpec
from parallel_rl.errors import ConfigError
from parallel_rl.policy import create_policy
from parallel_rl.policy.nets import ChannelsLastConv, mlp

BOARD = {"type": "conv", "shape": [6, 7, 2], "channels": [8], "kernel_size": 3}


def test_conv_reads_observations_channels_last():
    conv = ChannelsLastConv([6, 7, 2], channels=[1], kernel_size=1)
    with torch.no_grad():  # one 1x1 filter that copies channel 1
        conv.net[0].weight.copy_(torch.tensor([0.0, 1.0]).reshape(1, 2, 1, 1))
        conv.net[0].bias.zero_()
    board = np.zeros((6, 7, 2), np.float32)
    board[2, 5, 1] = 1.0  # row 2, column 5, plane 1
    board[4, 0, 0] = 1.0  # plane 0: not copied
    out = conv(torch.as_tensor(board.reshape(1, -1))).detach()
    assert out.shape == (1, 42) and conv.out_dim == 42
    expected = np.zeros((6, 7), np.float32)
    expected[2, 5] = 1.0
    np.testing.assert_array_equal(out.numpy().reshape(6, 7), expected)


@pytest.mark.parametrize("policy_type", ["dqn", "ppo"])
def test_policies_build_the_conv_encoder(policy_type):
    cfg = compile_config(
        {
            "env": {"type": "pettingzoo", "env_id": "pettingzoo.classic.connect_four_v3"},
            "policy": {"type": policy_type, "model": {"hidden_size_list": [16], "encoder": BOARD}},
        }
        if policy_type == "dqn"
        else {"policy": {"type": "ppo", "model": {"hidden_size_list": [16], "encoder": BOARD}}}
    )
    policy = create_policy(cfg.policy, 84, ActionSpec.discrete(7), seed=0)
    assert any(isinstance(m, ChannelsLastConv) for m in policy.model.modules())
    obs = np.random.default_rng(0).random((5, 6, 7, 2)).astype(np.float32)
    mask = np.zeros((5, 7), bool)
    mask[:, 3] = True
    out = policy.eval_mode.forward(obs, mask=mask)
    actions = out["action"] if isinstance(out, dict) else out
    assert np.asarray(actions).tolist() == [3] * 5  # the only legal move
    state = policy.model_state_dict()
    again = create_policy(cfg.policy, 84, ActionSpec.discrete(7), seed=1)
    again.load_model_state_dict(state)
    for key, value in again.model_state_dict().items():
        torch.testing.assert_close(value, state[key])


@pytest.mark.parametrize(
    "encoder, match",
    [
        ({"type": "conv", "shape": [6, 7, 3], "channels": [8]}, r"shape=\[6, 7, 3\]"),
        ({"type": "conv", "shape": [6, 7, 2], "channels": []}, r"channels=\[\]"),
        ({"type": "conv", "shape": [6, 7, 2], "channels": [8], "kernel_size": 4}, "kernel_size=4"),
        ({"type": "transformer"}, "'transformer'"),
    ],
)
def test_bad_encoder_config_names_the_value(encoder, match):
    with pytest.raises(ConfigError, match=match):
        mlp(84, [16], 7, "policy.model.hidden_size_list", encoder=encoder)


def test_mlp_encoder_keeps_the_plain_layers():
    net = mlp(4, [8], 2, "policy.model.hidden_size_list", encoder={"type": "mlp"})
    assert [type(m).__name__ for m in net] == ["Linear", "ReLU", "Linear"]
