"""The league survives a coordinator restart: pool, payoff table and games are in the coordinator's snapshot."""

from __future__ import annotations

import json
import signal
import time

import pytest
import requests

from parallel_rl.config import compile_config
from parallel_rl.coordinator.commander import LeagueCommander, SoloCommander
from parallel_rl.league import MAIN, League
from tests.support import eventually
from tests.test_marine import CLUSTER_CONFIG
from tests.support import free_port

TOKEN = "league-token"
ENV = {"PARALLEL_RL_TOKEN": TOKEN}


def played_league(seed=0) -> League:
    league = League({"snapshot_every": 5, "pool_size": 2, "bots": ["random", "lookahead"]}, seed=seed)
    for version in (0, 5, 10):
        league.add_snapshot(version)
    league.record(MAIN, "random", ["win", "win", "draw"])
    league.record(MAIN, "v5", ["loss"])
    league.record(MAIN, MAIN, ["win", "loss"])
    return league


def test_league_state_round_trips_through_json_and_goes_on_alike():
    league = played_league()
    state = json.loads(json.dumps(league.state_dict()))  # plain JSON: what the snapshot holds
    restored = League({"snapshot_every": 5, "pool_size": 2, "bots": ["random", "lookahead"]}, seed=99)
    restored.load_state_dict(state)
    assert restored.table() == league.table()
    assert restored.table()["retired"] == ["v0"] and restored.pool == ["random", "lookahead", "v5", "v10"]
    # the same next snapshot and the same PFSP choices (the generator's state is restored too)
    assert restored.wants_snapshot(14) is league.wants_snapshot(14) is False and restored.wants_snapshot(15)
    assert [restored.choose_opponent() for _ in range(50)] == [league.choose_opponent() for _ in range(50)]


def test_a_resumed_league_plays_the_bots_its_config_names_now():
    state = json.loads(json.dumps(played_league().state_dict()))  # saved with random and lookahead
    restored = League({"snapshot_every": 5, "pool_size": 2, "bots": ["first_legal", "random"]}, seed=0)
    restored.load_state_dict(state)
    assert restored.pool == ["first_legal", "random", "v5", "v10"]  # lookahead left, first_legal joined
    table = restored.table()
    assert table["players"] == [MAIN, "first_legal", "random", "v5", "v10"]
    assert table["payoff"][MAIN]["random"]["wins"] == 2 and table["games"] == 6  # results kept


def test_league_state_that_does_not_fit_is_refused_naming_the_field():
    state = played_league().state_dict()
    state["payoff"][MAIN]["random"] = [1, 2]
    with pytest.raises(ValueError, match=r"league payoff\['main'\]\['random'\] must be 3 counts"):
        League().load_state_dict(state)


def test_commanders_keep_the_league_in_the_coordinators_state():
    battle = compile_config(
        {
            "env": {"type": "pettingzoo", "env_id": "parallel_rl.envs.toy_battle:countdown_env"},
            "league": {"bots": ["first_legal"]},
        }
    )
    commander = LeagueCommander(battle)
    commander.league.add_snapshot(3)
    commander.league.record(MAIN, "v3", ["win"])
    state = json.loads(json.dumps(commander.state_dict()))
    other = LeagueCommander(battle)
    other.load_state_dict(state)
    assert other.league.table() == commander.league.table()
    other = LeagueCommander(battle)
    other.load_state_dict({})  # a state saved before leagues were kept: a new league
    assert other.league.table()["games"] == 0
    solo = SoloCommander(compile_config({}))
    assert solo.state_dict() == {}
    with pytest.raises(ValueError, match="holds a league .* parallel.commander.type is 'solo'"):
        solo.load_state_dict(state)


def get(url, path):
    return requests.get(f"{url}/api/v1{path}", timeout=5).json()


@pytest.mark.slow
def test_a_killed_coordinator_resumes_its_league(cli, tmp_path):
    """A real coordinator process, killed (SIGKILL) and started again on its directory: GET /api/v1/league shows
    the same players, payoff table and games, and training goes on with that league."""
    config = tmp_path / "battle.py"
    config.write_text(CLUSTER_CONFIG)
    shared = str(tmp_path / "shared")
    port = str(free_port())
    url = f"http://127.0.0.1:{port}"
    args = (
        "coordinator",
        "-c",
        str(config),
        "--port",
        port,
        "--shared-dir",
        shared,
        "--set",
        "parallel.coordinator.snapshot_interval=0.3",
        "--set",
        "parallel.commander.max_seconds=300",
        "--set",
        f"exp_name={tmp_path / 'exp'}",
    )
    coordinator = cli("coordinator", *args, env=ENV)
    coordinator.wait_line(r"^REST API: ")
    workers = [
        cli(kind, kind, "--coordinator", url, "--shared-dir", shared, env=ENV) for kind in ("learner", "collector")
    ]

    def league_played():
        league = get(url, "/league")
        # games against the bot and a snapshot, and a snapshot already retired from the pool
        played = league["payoff"].get(MAIN, {})
        return (
            league
            if (
                played.get("first_legal", {}).get("games", 0)
                and any(o.startswith("v") for o in played)
                and league["retired"]
            )
            else None
        )

    eventually(league_played, timeout=150, interval=0.5, message="a league with games, snapshots and a retiree")
    for worker in workers:  # no more games or policy versions: the league stands still
        worker.proc.send_signal(signal.SIGTERM)
        assert worker.wait(30) == 0, worker.output()[-2000:]
    quiet = time.time()
    eventually(
        lambda: (get(url, "/cluster")["state_saved_at"] or 0) > quiet,
        timeout=10,
        message="a snapshot after the workers left",
    )
    before = get(url, "/league")
    assert before["games"] > 0 and before["pool"][0] == "first_legal" and len(before["pool"]) == 3
    coordinator.proc.send_signal(signal.SIGKILL)
    coordinator.wait(10)

    restarted = cli("coordinator-2", *args, env=ENV)
    restarted.wait_line(r"^REST API: ", timeout=60)
    assert get(url, "/cluster")["resumed_from"] is not None
    assert get(url, "/league") == before  # players, pool, retired, payoff table and games

    # training goes on with the restored league: new games add to the old counts, the pool moves on from it
    workers = [
        cli(f"{kind}-2", kind, "--coordinator", url, "--shared-dir", shared, env=ENV)
        for kind in ("learner", "collector")
    ]

    def more_games():
        league = get(url, "/league")
        return league if league["games"] > before["games"] else None

    after = eventually(more_games, timeout=120, interval=0.5, message="new games after the restart")
    for opponent, row in before["payoff"][MAIN].items():
        for outcome in ("wins", "draws", "losses"):
            assert after["payoff"][MAIN][opponent][outcome] >= row[outcome]
    assert set(before["retired"]) <= set(after["retired"])


def test_a_retired_snapshot_stays_on_disk_while_a_task_still_names_it(tmp_path):
    """A snapshot leaves the pool while a collector task handed out before still names it as the opponent:
    its file stays until that task ends (the collector finds what it was told to play), then goes."""
    from parallel_rl.coordinator.commander_api import CommanderHandle
    from parallel_rl.coordinator.tasks import TaskKind, TaskState, TaskTable
    from parallel_rl.coordinator.workers import WorkerRegistry
    from parallel_rl.storage import SharedStorage

    battle = compile_config(
        {
            "env": {"type": "pettingzoo", "env_id": "parallel_rl.envs.toy_battle:countdown_env"},
            "league": {"bots": ["first_legal"], "snapshot_every": 5, "pool_size": 1},
        }
    )
    storage, tasks, version = SharedStorage(str(tmp_path / "shared")), TaskTable(), [0]
    commander = LeagueCommander(battle)
    commander.attach(
        CommanderHandle(
            storage=storage,
            workers=WorkerRegistry(),
            tasks=tasks,
            assign=lambda task, worker: False,
            finish=lambda state, reason: None,
            policy_version=lambda: version[0],
            over=lambda: False,
        )
    )
    for v in (0, 5, 10):
        storage.policies.save(v, {"w": [float(v)]})
    commander.step()
    assert storage.league.versions() == [0]
    task = tasks.create(TaskKind.COLLECTOR, {"env_steps": 64, "players": {"train": MAIN, "opponent": "v0"}})
    tasks.start(task, "collector-1")
    version[0] = 5
    commander.step()  # v5 joins, v0 leaves the pool; the running task still names v0
    assert commander.league.pool == ["first_legal", "v5"] and storage.league.versions() == [0, 5]
    tasks.end(task.task_id, TaskState.FINISHED, {"env_steps": 64})
    commander.step()
    assert storage.league.versions() == [5]
    version[0] = 10
    commander.step()  # nobody names v5: its file goes with it
    assert storage.league.versions() == [10]
