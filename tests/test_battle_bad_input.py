"""Bad input for two-player games (issue #12 item 5): each a clear error or a documented fallback, never a hang."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from easydict import EasyDict

from parallel_rl.config import compile_config
from parallel_rl.coordinator.commander import LeagueCommander
from parallel_rl.coordinator.tasks import Task, TaskKind
from parallel_rl.envs.multiagent import battle_env_spaces
from parallel_rl.errors import ConfigError

COUNTDOWN = "parallel_rl.envs.toy_battle:countdown_env"


def battle_config(tmp_path, **env_kwargs):
    config = tmp_path / "battle.py"
    config.write_text(
        "main_config = "
        + repr(
            {
                "exp_name": str(tmp_path / "exp"),
                "env": {"type": "pettingzoo", "env_id": COUNTDOWN, "env_kwargs": env_kwargs},
                "league": {"bots": ["first_legal"]},
                "system": {"tensorboard": False},
            }
        )
    )
    return str(config)


@pytest.mark.parametrize(
    "command, env_kwargs, message",
    [
        ("serial", {"n_agents": 3}, "has 3 agents"),
        ("run", {"loser_reward": 0.0}, "is not zero-sum: a game ended with returns (1.0, 0.0)"),
        ("coordinator", {"mask": False}, "gives no action mask"),
    ],
)
def test_bad_games_are_refused_before_anything_starts(tmp_path, command, env_kwargs, message):
    """Every command checks the game (one game played with the first legal moves) before it starts a
    process or serves: exit code 2 and one line naming the problem."""
    proc = subprocess.run(
        [sys.executable, "-m", "parallel_rl", command, "-c", battle_config(tmp_path, **env_kwargs)],
        capture_output=True,
        text=True,
        timeout=90,
        env={**os.environ, "PARALLEL_RL_TOKEN": "t"},
    )
    assert proc.returncode == 2, proc.stderr[-2000:]
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith(f"parallel-rl {command}: error: ") and message in last, proc.stderr[-2000:]
    assert "REST API" not in proc.stdout and not (tmp_path / "exp").exists()


def test_a_game_that_ends_zero_sum_passes_the_check():
    assert battle_env_spaces(EasyDict(env_id=COUNTDOWN, env_kwargs={"start": 9}))[1].n == 2
    with pytest.raises(ConfigError, match="not zero-sum"):
        battle_env_spaces(EasyDict(env_id=COUNTDOWN, env_kwargs={"loser_reward": -2.0}))


def test_a_config_every_collector_task_fails_on_ends_the_run(coordinator_factory):
    """A game found not zero-sum mid-run fails the collector task with a ConfigError; once its attempts are used
    up the run ends (failed, with the reason) instead of handing out new tasks that fail alike."""
    import time

    coordinator, _ = coordinator_factory()
    # a task's chain carries the times of its earlier failures (counted within task_failure_window)
    now = time.time()
    other = Task(
        "collector-x-000001",
        TaskKind.COLLECTOR,
        {},
        attempts=3,
        error="RuntimeError: a flaky env",
        failures=[now - 2, now - 1],
    )
    coordinator.commander.on_task_failed(other)
    assert coordinator.summary()["state"] == "running"  # other failures: the collectors go on with new tasks
    error = "ConfigError: env 'x' is not zero-sum: a game ended with returns (1.0, 0.0) (seat 0, seat 1)"
    coordinator.commander.on_task_failed(
        Task("collector-x-000002", TaskKind.COLLECTOR, {}, attempts=2, error=error, failures=[now - 1])
    )
    assert coordinator.summary()["state"] == "running"  # attempts left: a replacement is issued
    coordinator.commander.on_task_failed(
        Task("collector-x-000003", TaskKind.COLLECTOR, {}, attempts=3, error=error, failures=[now - 2, now - 1])
    )
    summary = coordinator.summary()
    assert (
        summary["state"] == "failed" and "collector task failed 3 times within 600s on the config" in summary["reason"]
    )
    assert "not zero-sum" in summary["reason"]


def test_an_opponent_whose_snapshot_is_gone_leaves_the_pool():
    """The Marine collector plays itself instead and reports the missing name (test_marine.py); the commander
    takes it out of the pool, keeps its results, and never picks it again."""
    cfg = compile_config(
        {"env": {"type": "pettingzoo", "env_id": COUNTDOWN}, "league": {"bots": [], "self_play_prob": 0.0}}
    )
    commander = LeagueCommander(cfg)
    commander.league.add_snapshot(3)
    commander.league.add_snapshot(400)
    commander.on_games("v3", {"win": 2})
    commander.on_task_finished(Task("collector-x-000001", TaskKind.COLLECTOR, {}, result={"opponent_missing": "v3"}))
    table = json.loads(json.dumps(commander.league.table()))
    assert table["pool"] == ["v400"] and table["retired"] == ["v3"] and table["payoff"]["main"]["v3"]["wins"] == 2
    assert {commander.league.choose_opponent() for _ in range(20)} == {"v400"}
