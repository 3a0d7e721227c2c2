"""PPO self-play: masked Categorical policy, on-policy battle rows (GAE over each player's own moves), the
serial pipeline, and the cluster's refusal."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
import torch
from easydict import EasyDict
from hypothesis import given, settings
from hypothesis import strategies as st

from parallel_rl.config import check_cluster_config, compile_config
from parallel_rl.coordinator.commander import LeagueCommander
from parallel_rl.entry.selfplay import selfplay_pipeline
from parallel_rl.envs.multiagent import BattleEnvManager
from parallel_rl.errors import ConfigError
from parallel_rl.policy import create_policy
from parallel_rl.policy.bots import create_bot
from parallel_rl.policy.ppo import gae_advantages
from parallel_rl.worker import BattleSampleSerialCollector
from parallel_rl.collector.serial import concat_columns

COUNTDOWN = "parallel_rl.envs.toy_battle:countdown_env"


def countdown(num_envs=1, **kwargs):
    return BattleEnvManager.from_cfg(EasyDict(env_id=COUNTDOWN, env_kwargs=kwargs), num_envs, seed=0)


class ScriptedOnPolicyPlayer:
    """Always takes 1 (action 0); reports what an on-policy collect mode does, made exact: ``logp`` =
    -counter / 10, ``value`` = counter / 10 and the mask it acted under."""

    def __init__(self, start: int):
        self.start = start

    def counter(self, obs):
        return np.rint(obs[:, 0] * self.start)

    def forward(self, obs, mask=None, **_):
        counter = self.counter(obs)
        return {
            "action": np.zeros(len(obs), dtype=np.int64),
            "logp": (-counter / 10).astype(np.float32),
            "value": (counter / 10).astype(np.float32),
            "action_mask": np.asarray(mask, dtype=bool).copy(),
        }


# ---- on-policy rows and advantages on the toy game -------------------------------------------------
def test_self_play_rows_are_each_players_own_trajectory_with_exact_advantages():
    player = ScriptedOnPolicyPlayer(start=5)
    collector = BattleSampleSerialCollector(
        EasyDict(trained_players=[0, 1]), countdown(1, start=5), [player, player], discount_factor=0.9
    )
    # countdown(5), both take 1: player 0 (seat 0) moves at 5, 3, 1 and wins; player 1 at 4, 2. Two rows each
    # are asked for; player 1's second row completes at the game's end (move 5), with player 0's third:
    # drop_extra=False returns every completed row, none is kept for a call that may act with a newer policy
    p0, p1 = collector.collect(n_sample=2, drop_extra=False)
    assert collector.envstep == 5 and collector.last_stats.episodes == 1
    assert player.counter(p0["obs"]).tolist() == [5, 3, 1] and player.counter(p1["obs"]).tolist() == [4, 2]
    # next_obs: the player's own view at its next turn (the opponent's move is part of the env)
    assert player.counter(p0["next_obs"][:2]).tolist() == [3, 1] and player.counter(p1["next_obs"][:1]).tolist() == [2]
    assert p0["reward"].tolist() == [0, 0, 1] and p1["reward"].tolist() == [0, -1]
    assert p0["done"].tolist() == p0["end"].tolist() == [False, False, True]
    assert p1["done"].tolist() == p1["end"].tolist() == [False, True]
    assert p0["logp"].tolist() == pytest.approx([-0.5, -0.3, -0.1]) and p1["value"].tolist() == pytest.approx(
        [0.4, 0.2]
    )
    assert p0["action_mask"].tolist() == [[True, True], [True, True], [True, False]]  # at 1, taking 2 is illegal
    assert p0["env_id"].tolist() == [0, 0, 0] and p1["env_id"].tolist() == [1, 1]  # 2 * game + player

    segment = concat_columns([p0, p1])
    next_value = np.array([0.3, 0.1, 0.0, 0.2, 0.0])  # the values at next_obs (terminal rows: unused)
    advantage = gae_advantages(
        segment["reward"].astype(np.float64),
        segment["value"].astype(np.float64),
        next_value,
        segment["done"],
        segment["end"],
        segment["env_id"],
        gamma=0.9,
        gae_lambda=0.8,
    )
    # player 0: deltas -0.23, -0.21, 0.9 -> A = 0.9, -0.21 + 0.72 * 0.9, -0.23 + 0.72 * 0.438;
    # player 1: deltas -0.22, -1.2 -> A = -1.2, -0.22 + 0.72 * -1.2 (the trajectories never mix)
    assert advantage.tolist() == pytest.approx([0.08536, 0.438, 0.9, -1.084, -1.2], abs=1e-6)

    # drop_extra=True (off-policy) keeps the surplus row for the next call, as before
    collector.reset_env()
    p0, p1 = collector.collect(n_sample=2)
    assert len(p0["obs"]) == len(p1["obs"]) == 2
    collector.close()


def test_rows_against_a_bot_are_the_trained_players_only_and_games_stay_apart():
    player = ScriptedOnPolicyPlayer(start=5)
    collector = BattleSampleSerialCollector(None, countdown(2, start=5), [player, create_bot("first_legal")])
    p0, p1 = collector.collect(n_sample=6, drop_extra=False)
    assert p1 == {} and collector.envstep == 14  # 7 moves in each game
    # player 0 is seat 0 in game 0 (moves at 5, 3, 1: a win) and seat 1 in game 1 (at 4, 2: a loss); then they
    # swap, and its move at 5 in game 1's second game completes at move 7. Its own moves only, in time order
    game0, game1 = p0["env_id"] == 0, p0["env_id"] == 2
    assert game0.sum() + game1.sum() == 6
    assert player.counter(p0["obs"][game0]).tolist() == [5, 3, 1] and p0["end"][game0].tolist() == [False, False, True]
    assert p0["reward"][game0].tolist() == [0, 0, 1]
    assert player.counter(p0["obs"][game1]).tolist() == [4, 2, 5] and p0["end"][game1].tolist() == [False, True, False]
    assert p0["reward"][game1].tolist() == [0, -1, 0]
    assert (p0["value"] == player.counter(p0["obs"]) / 10).all()
    collector.close()


def test_ppo_learns_from_a_self_play_segment():
    cfg = compile_config(
        {
            "env": {"type": "pettingzoo", "env_id": COUNTDOWN},
            "policy": {
                "type": "ppo",
                "model": {"hidden_size_list": [8]},
                "learn": {"epoch_per_collect": 2, "batch_size": 8},
            },
        }
    )
    env = countdown(2, start=5)
    policy = create_policy(cfg.policy, env.obs_dim, env.action_spec, seed=0)
    collector = BattleSampleSerialCollector(
        EasyDict(trained_players=[0, 1]), env, [policy.collect_mode, policy.collect_mode]
    )
    segment = concat_columns(collector.collect(n_sample=16, drop_extra=False))
    assert {"logp", "value", "action_mask", "env_id", "end"} <= set(segment)
    assert segment["action_mask"][np.arange(len(segment["action"])), segment["action"]].all()
    info = policy.learn_mode.forward(segment)
    assert info["updates"] == 2 * (len(segment["action"]) // 8) and np.isfinite(float(info["loss"]))
    collector.close()


# ---- masks honoured when PPO learns ------------------------------------------------------------------
masks = st.integers(2, 9).flatmap(
    lambda n: st.lists(st.lists(st.booleans(), min_size=n, max_size=n).filter(any), min_size=2, max_size=16)
)


@settings(max_examples=40, deadline=None)
@given(mask=masks, seed=st.integers(0, 2**16))
def test_ppo_learning_uses_the_masked_distribution(mask, seed):
    """The log-probabilities and entropy PPO learns with are those of the masked distribution the actions were
    sampled from: illegal actions have probability 0, so the first update's ratio is exactly 1 (approx_kl 0)
    and the entropy is the legal actions' only."""
    mask = np.array(mask, dtype=bool)
    n, a = mask.shape
    cfg = compile_config(
        {
            "policy": {
                "type": "ppo",
                "model": {"hidden_size_list": [8]},
                "learn": {"epoch_per_collect": 1, "batch_size": n, "adv_norm": False},
            }
        }
    )
    policy = create_policy(cfg.policy, 3, a, seed=seed)
    obs = np.random.default_rng(seed).normal(size=(n, 3)).astype(np.float32)
    out = policy.collect_mode.forward(obs, mask=mask)
    assert mask[np.arange(n), out["action"]].all()
    with torch.no_grad():
        logits = policy.model.actor(torch.as_tensor(obs)).double()
    legal = torch.as_tensor(mask)
    log_p = torch.log_softmax(logits.masked_fill(~legal, -float("inf")), dim=-1)
    expected_entropy = -(log_p.exp() * log_p.masked_fill(~legal, 0.0)).sum(-1).mean().item()
    assert out["logp"] == pytest.approx(log_p[np.arange(n), out["action"]].numpy(), abs=1e-5)
    segment = {
        "obs": obs,
        "action": out["action"],
        "logp": out["logp"],
        "value": out["value"],
        "action_mask": out["action_mask"],
        "reward": np.ones(n, np.float32),
        "next_obs": obs,
        "done": np.ones(n, bool),
        "end": np.ones(n, bool),
        "env_id": np.arange(n),
    }
    info = policy.learn_mode.forward(segment)
    assert float(info["approx_kl"]) == pytest.approx(0.0, abs=1e-5)
    assert float(info["clip_fraction"]) == 0.0
    assert float(info["entropy"]) == pytest.approx(expected_entropy, abs=1e-4)


# ---- configs ------------------------------------------------------------------------------------------
def test_self_play_algorithms_and_the_cluster_refusal():
    base = {"env": {"type": "pettingzoo", "env_id": "pettingzoo.classic.tictactoe_v3"}}
    ppo = compile_config({**base, "policy": {"type": "ppo"}})
    assert ppo.policy.other.replay_buffer.type == "segment" and ppo.league.pool_size == 10
    with pytest.raises(ConfigError, match="two-player self-play trains policy.type 'dqn' or 'ppo', got 'sac'"):
        compile_config({**base, "policy": {"type": "sac"}})
    with pytest.raises(ConfigError, match="serial pipeline only .* policy.type='dqn'"):
        check_cluster_config(ppo)
    with pytest.raises(ConfigError, match="serial pipeline only"):
        LeagueCommander(ppo)
    check_cluster_config(compile_config(base))  # DQN self-play runs on the cluster


def test_cli_run_refuses_ppo_self_play_before_starting_anything(tmp_path):
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "parallel_rl",
            "run",
            "-c",
            "configs/tictactoe_selfplay_ppo.py",
            "--set",
            f"exp_name={tmp_path / 'exp'}",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "runs in the serial pipeline only" in proc.stderr and "REST API" not in proc.stdout
    assert not (tmp_path / "exp").exists()


# ---- the serial pipeline --------------------------------------------------------------------------------
def ppo_countdown_cfg(tmp_path, **serial):
    return compile_config(
        {
            "exp_name": str(tmp_path / "exp"),
            "env": {
                "type": "pettingzoo",
                "env_id": COUNTDOWN,
                "env_kwargs": {"start": 7},
                "collector_env_num": 4,
                "evaluator_env_num": 2,
                "n_evaluator_episode": 20,
                "stop_value": 1.0,
            },
            "policy": {
                "type": "ppo",
                "model": {"hidden_size_list": [32]},
                "discount_factor": 0.99,
                "collect": {"n_sample": 64},
                "learn": {"epoch_per_collect": 4, "batch_size": 32, "learning_rate": 3e-3, "entropy_weight": 0.01},
                "eval": {
                    "evaluator": {
                        "eval_freq": 5,
                        "opponents": ["random", "first_legal"],
                        "stop_opponent": "first_legal",
                    }
                },
            },
            "league": {"snapshot_every": 5, "pool_size": 2, "bots": ["random"], "self_play_prob": 0.5},
            "serial": serial,
            "system": {"tensorboard": False},
        }
    )


def test_ppo_selfplay_pipeline_grows_the_pool_and_fills_the_payoff_table(tmp_path):
    evals = []
    result = selfplay_pipeline(ppo_countdown_cfg(tmp_path, max_train_iter=16), on_eval=evals.append)
    assert result.reason == "train iteration budget 16 used up" and result.train_iter == 16
    league = evals[-1]["league"]
    # the last evaluation (iteration 15): a snapshot every 5 segments, the pool keeps the last 2
    assert league["pool"] == ["random", "v5", "v10"] and league["retired"] == ["v0"]
    assert league["games"] > 0 and sum(row["games"] for row in league["payoff"]["main"].values()) == league["games"]
    assert (tmp_path / "exp" / "ckpt" / "ckpt_final.pt").is_file()


@pytest.mark.slow
def test_ppo_selfplay_learns_the_toy_game_against_first_legal(tmp_path):
    result = selfplay_pipeline(ppo_countdown_cfg(tmp_path, max_train_iter=400))
    # perfect play wins countdown(7) against "take 1" from both sides (see test_selfplay.py)
    assert result.solved, result.summary()
