"""Self-play on the cluster: the Marine collector, the league commander, GET /api/v1/league."""

from __future__ import annotations

import os
import textwrap

import numpy as np
import pytest
import requests

from parallel_rl.config import compile_config
from parallel_rl.storage import SharedStorage, load_npz
from parallel_rl.collector.cluster_battle import BattleClusterCollector
from tests.support import eventually

BATTLE = {
    "type": "pettingzoo",
    "env_id": "parallel_rl.envs.toy_battle:countdown_env",
    "env_kwargs": {"start": 5},
    "collector_env_num": 2,
    "evaluator_env_num": 2,
    "n_evaluator_episode": 4,
}


@pytest.fixture
def marine(tmp_path):
    cfg = compile_config(
        {
            "env": BATTLE,
            "policy": {
                "model": {"hidden_size_list": [8]},
                "nstep": 1,
                "eval": {"evaluator": {"opponents": ["first_legal"]}},
            },
        }
    )
    storage = SharedStorage(str(tmp_path / "shared"))
    collector = BattleClusterCollector(cfg, storage, seed=0)
    yield collector, storage
    collector.close()


def test_marine_writes_training_player_rows_only(marine):
    collector, _ = marine
    assert collector.set_opponent("first_legal") == ("first_legal", None)
    data, stats = collector.collect(10, eps=0.5)
    # 10 rows of the training player; the bot's moves are played (env steps) but not recorded
    assert len(data["action"]) == 10 and stats.env_steps > 10
    assert data["next_action_mask"].shape == (10, 2)
    assert collector.set_opponent("self") == ("self", None)
    data, stats = collector.collect(9, eps=0.5)
    assert len(data["action"]) == 9  # both seats' rows, shared: a chunk never holds more rows than asked


def test_marine_plays_a_league_snapshot_and_falls_back_when_it_is_gone(marine):
    collector, storage = marine
    storage.policies.save(3, collector.policy.collect_mode.state_dict())
    storage.league.freeze(3)
    assert storage.league.versions() == [3]
    assert collector.set_opponent("v3") == ("v3", None)
    data, _ = collector.collect(4, eps=0.0)
    assert len(data["action"]) == 4
    assert collector.set_opponent("v7") == ("self", "v7")  # never frozen: play itself, say what was missing
    with pytest.raises(ValueError, match="unknown opponent 'nobody'"):
        collector.set_opponent("nobody")


def test_marine_evaluation_reports_the_stop_rule(marine):
    collector, storage = marine
    storage.policies.save(0, collector.policy.collect_mode.state_dict())
    info = collector.evaluate(0, 4)
    assert set(info["results"]) == {"first_legal"} and isinstance(info["stop"], bool)
    assert info["policy_version"] == 0 and info["episodes"] == 8


def test_league_endpoint_is_404_without_a_league(coordinator_factory):
    _, server = coordinator_factory()
    r = requests.get(f"{server.url}/api/v1/league", timeout=5)
    assert r.status_code == 404 and "two-player self-play" in r.json()["error"]["message"]


CLUSTER_CONFIG = textwrap.dedent("""
    main_config = dict(
        env=dict(type="pettingzoo", env_id="parallel_rl.envs.toy_battle:countdown_env", env_kwargs=dict(start=5),
                 collector_env_num=2, evaluator_env_num=2, n_evaluator_episode=4, stop_value=1.01),
        policy=dict(model=dict(hidden_size_list=[16]), nstep=1, learn=dict(batch_size=16),
                    other=dict(eps=dict(decay=300)), eval=dict(evaluator=dict(opponents=["first_legal"]))),
        league=dict(snapshot_every=5, pool_size=2, bots=["first_legal"], self_play_prob=0.0),
        parallel=dict(coordinator=dict(heartbeat_ttl=2.0), worker=dict(heartbeat_interval=0.2),
                      commander=dict(eval_freq=20, max_seconds=120.0, max_env_steps_per_update=8.0,
                                     collector_task_env_steps=64),
                      collector=dict(chunk_size=32),
                      learner=dict(min_buffer_size=32, publish_every=5, save_state_every=20)),
    )
""")


def test_cluster_self_play_fills_the_payoff_table_and_grows_the_pool(cli, tmp_path):
    config = tmp_path / "battle.py"
    config.write_text(CLUSTER_CONFIG)
    run = cli("run", "run", "-c", str(config), "--set", f"exp_name={tmp_path / 'exp'}", "--collectors", "2")
    url = run.wait_line(r"^REST API: (http://127\.0\.0\.1:\d+/api/v1)$", timeout=90).group(1)

    def league_ready():
        league = requests.get(url + "/league", timeout=5).json()
        played = league["payoff"].get("main", {})
        snapshots_played = [o for o in played if o.startswith("v")]
        # results arrived for the bot and for snapshots, and the pool has moved on past its first snapshots
        return (
            league
            if (played.get("first_legal", {}).get("games", 0) > 0 and snapshots_played and len(league["retired"]) >= 2)
            else None
        )

    league = eventually(league_ready, timeout=120, interval=0.5, message="payoff table and pool")
    assert league["pool"][0] == "first_legal" and len(league["pool"]) == 3  # the bot and pool_size snapshots
    assert league["payoff"]["first_legal"]["main"]["losses"] == league["payoff"]["main"]["first_legal"]["wins"]
    # the league keeps the pool's files only: retired snapshots are deleted (one more may be on its way in, and
    # a retired one stays while a running task, one per collector, still names it)
    shared = tmp_path / "exp" / "shared"
    assert len([n for n in os.listdir(shared / "league") if n.startswith("snapshot_")]) <= 2 + 1 + 2
    # step data: the training player's rows only (self_play_prob=0): about half the moves, not all of them
    tasks = requests.get(url + "/tasks?kind=collector&state=finished", timeout=5).json()["tasks"]
    done = [t["result"] for t in tasks if t["result"] and t["result"]["env_steps"] >= 64]
    assert done and all(r["opponent"] != "self" for r in done)
    moves, rows = sum(r["env_steps"] for r in done), sum(r["transitions"] for r in done)
    assert rows <= 0.6 * moves, (rows, moves)
    assert all(sum(r["games"].values()) > 0 for r in done)
    chunk = load_npz(
        str(next(p for p in (shared / "data").iterdir() if p.name.endswith(".npz") and not p.name.startswith(".")))
    )
    assert "next_action_mask" in chunk and chunk["next_action_mask"].dtype == np.bool_
