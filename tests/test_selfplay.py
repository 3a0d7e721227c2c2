"""The serial self-play pipeline and the league (opponent pool, payoff table, PFSP)."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from parallel_rl.config import compile_config
from parallel_rl.league import MAIN, SELF, League
from parallel_rl.entry.selfplay import selfplay_pipeline
from parallel_rl.errors import ConfigError


def countdown_cfg(tmp_path, **serial):
    return compile_config(
        {
            "exp_name": str(tmp_path / "exp"),
            "env": {
                "type": "pettingzoo",
                "env_id": "parallel_rl.envs.toy_battle:countdown_env",
                "env_kwargs": {"start": 7},
                "collector_env_num": 4,
                "evaluator_env_num": 2,
                "n_evaluator_episode": 20,
                "stop_value": 0.99,
            },
            "policy": {
                "model": {"hidden_size_list": [32]},
                "nstep": 1,
                "collect": {"n_sample": 16},
                "learn": {"update_per_collect": 2, "batch_size": 16},
                "eval": {"evaluator": {"eval_freq": 10, "opponents": ["random", "first_legal"]}},
            },
            "league": {"snapshot_every": 10, "pool_size": 2, "bots": ["random"], "self_play_prob": 0.5},
            "serial": serial,
            "system": {"tensorboard": False},
        }
    )


def test_selfplay_pipeline_grows_the_pool_and_fills_the_payoff_table(tmp_path):
    evals = []
    result = selfplay_pipeline(countdown_cfg(tmp_path, max_train_iter=60), on_eval=evals.append)
    assert not result.solved and result.reason == "train iteration budget 60 used up"
    assert result.train_iter == 60
    league = evals[-1]["league"]
    # snapshots at iterations 0, 10, ..., 50; the pool keeps the last 2
    assert league["pool"] == ["random", "v40", "v50"]
    assert league["retired"] == ["v0", "v10", "v20", "v30"]
    played = league["payoff"][MAIN]
    assert sum(row["games"] for row in played.values()) == league["games"]  # every game has main in it
    assert league["games"] > 0 and set(played) <= {MAIN, "random", "v0", "v10", "v20", "v30", "v40", "v50"}
    # the evaluator plays every opponent from both sides
    assert set(evals[-1]["results"]) == {"random", "first_legal"}
    assert all(r["games"] == 20 for sides in evals[-1]["results"].values() for r in sides.values())
    assert (tmp_path / "exp" / "ckpt" / "ckpt_final.pt").is_file()


def test_selfplay_learns_the_toy_game_against_first_legal(tmp_path):
    cfg = countdown_cfg(tmp_path, max_train_iter=3000)
    cfg.policy.eval.evaluator.stop_opponent = "first_legal"
    cfg.run.stop_value = 1.0
    result = selfplay_pipeline(cfg)
    # countdown from 7: the first mover wins by taking 1 (leaving 6, a multiple of 3); against "take 1" the
    # second mover wins as well (7 -> 6 -> 4 -> 3 ...): perfect play wins every game from both sides
    assert result.solved, result.summary()


def test_league_pfsp_prefers_harder_opponents():
    league = League({"self_play_prob": 0.0, "bots": ["random", "lookahead"]}, seed=0)
    league.record(MAIN, "random", ["win"] * 50)
    league.record(MAIN, "lookahead", ["loss"] * 50)
    picks = [league.choose_opponent() for _ in range(200)]
    assert picks.count("lookahead") > 150 and SELF not in picks
    table = league.table()
    assert table["payoff"]["lookahead"][MAIN]["wins"] == 50  # the mirror row
    assert table["payoff"][MAIN]["random"]["win_rate"] == 1.0 and table["games"] == 100


def test_league_without_opponents_plays_itself():
    league = League({"self_play_prob": 0.0, "bots": []}, seed=0)
    assert league.choose_opponent() == SELF
    league.add_snapshot(5)
    assert league.pool == ["v5"] and league.choose_opponent() == "v5"
    league.remove("v5")
    assert league.pool == [] and league.table()["retired"] == ["v5"]


@pytest.mark.parametrize(
    "league_cfg, match",
    [
        ({"pool_size": 0}, "pool_size"),
        ({"self_play_prob": 2.0}, "self_play_prob"),
        ({"pfsp_weighting": "soft"}, "pfsp_weighting"),
    ],
)
def test_league_bad_config(league_cfg, match):
    with pytest.raises(ConfigError, match=match):
        League(league_cfg)


def test_battle_config_errors(tmp_path):
    base = {"env": {"type": "pettingzoo", "env_id": "pettingzoo.classic.tictactoe_v3"}}
    assert compile_config({**base, "policy": {"nstep": 3}}).policy.nstep == 3  # n-step rows per player
    assert compile_config(base).policy.nstep == 1
    with pytest.raises(ConfigError, match="unknown config key 'league'"):
        compile_config({"league": {"pool_size": 3}})
    assert compile_config(base).league.pool_size == 10


def test_cli_serial_selfplay_budget_exits_3(tmp_path):
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "parallel_rl",
            "serial",
            "-c",
            "configs/tictactoe_selfplay.py",
            "--set",
            f"exp_name={tmp_path / 'exp'}",
            "--set",
            "serial.max_train_iter=16",
            "--set",
            "env.n_evaluator_episode=16",
            "--set",
            "system.tensorboard=false",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 3, proc.stderr[-2000:]
    assert "train iteration budget 16 used up" in proc.stderr
    assert np.isfinite(float(proc.stdout.split("last_eval_return=")[1].split()[0]))
