"""Two-player games: the PettingZoo adapter, masked actions, battle collectors and evaluator (exact counts)."""

from __future__ import annotations

import numpy as np
import pytest
from easydict import EasyDict
from hypothesis import given, settings
from hypothesis import strategies as st

from parallel_rl.config import compile_config
from parallel_rl.envs.multiagent import BattleEnvManager, battle_env_spaces
from parallel_rl.errors import ConfigError
from parallel_rl.policy import create_policy
from parallel_rl.policy.bots import create_bot
from parallel_rl.worker import (
    BattleEpisodeSerialCollector,
    BattleInteractionSerialEvaluator,
    BattleSampleSerialCollector,
)

COUNTDOWN = "parallel_rl.envs.toy_battle:countdown_env"


def countdown(num_envs=2, **kwargs):
    return BattleEnvManager.from_cfg(EasyDict(env_id=COUNTDOWN, env_kwargs=kwargs), num_envs, seed=0)


class PerfectCountdownPlayer:
    """Takes the counter to a multiple of 3 when it can (then it always wins), else takes 1."""

    def __init__(self, start: int):
        self.start = start

    def forward(self, obs, mask=None, **_):
        counter = np.rint(obs[:, 0] * self.start).astype(np.int64)
        take = counter % 3  # 1 or 2 wins the race to 0; 0: a lost position
        return np.where(take == 0, 0, take - 1)


# ---- the env layer ------------------------------------------------------------------------------
def test_tictactoe_and_connect_four_spaces():
    obs_shape, spec = battle_env_spaces(EasyDict(env_id="pettingzoo.classic.tictactoe_v3"))
    assert obs_shape == (3, 3, 2) and spec.n == 9
    obs_shape, spec = battle_env_spaces(EasyDict(env_id="pettingzoo.classic.connect_four_v3"))
    assert obs_shape == (6, 7, 2) and spec.n == 7


def test_more_than_two_agents_is_a_config_error():
    with pytest.raises(ConfigError, match="3 agents"):
        countdown(n_agents=3)


def test_non_zero_sum_game_is_a_config_error():
    env = countdown(1, loser_reward=0.0)
    env.reset()
    first = create_bot("first_legal")
    with pytest.raises(ConfigError, match="not zero-sum"):
        for _ in range(10):
            env.step(first.forward(env.obs, env.mask))


def test_missing_mask_is_a_config_error_unless_declared():
    cfg = EasyDict(env_id=COUNTDOWN, env_kwargs={"mask": False})
    with pytest.raises(ConfigError, match="action_mask='none'"):
        battle_env_spaces(cfg)
    cfg.action_mask = "none"
    assert battle_env_spaces(cfg)[1].n == 2


def test_unknown_module_is_a_config_error():
    with pytest.raises(ConfigError, match="cannot import"):
        battle_env_spaces(EasyDict(env_id="no_such_module_xyz"))


def test_illegal_action_is_refused_by_the_env():
    env = countdown(1, start=1)
    env.reset()
    with pytest.raises(ValueError, match="illegal action 1"):
        env.step(np.array([1]))


def test_parallel_api_game_through_pettingzoo_conversion():
    env = BattleEnvManager.from_cfg(
        EasyDict(env_id="parallel_rl.envs.toy_battle:duel_parallel_env", env_kwargs={"rounds": 3}, action_mask="none"),
        1,
        seed=0,
    )
    env.reset()
    results, transitions = [], 0
    for _ in range(6):  # 3 rounds, two moves each
        step = env.step(np.zeros(1, dtype=np.int64))  # both always pick 0: player_0 wins every round
        results += step.results
        transitions += len(step.transitions)
    assert [r.returns for r in results] == [(3.0, -3.0)]
    assert transitions == 6


# ---- masked actions -----------------------------------------------------------------------------
masks = st.integers(1, 9).flatmap(
    lambda n: st.lists(st.lists(st.booleans(), min_size=n, max_size=n).filter(any), min_size=1, max_size=16)
)


@pytest.fixture(scope="module")
def dqn():
    cfg = compile_config({"policy": {"model": {"hidden_size_list": [8]}}})
    return {n: create_policy(cfg.policy, 3, n, seed=0) for n in range(1, 10)}


@pytest.fixture(scope="module")
def ppo():
    cfg = compile_config({"policy": {"type": "ppo", "model": {"hidden_size_list": [8]}}})
    return {n: create_policy(cfg.policy, 3, n, seed=0) for n in range(1, 10)}


@settings(max_examples=60, deadline=None)
@given(mask=masks, eps=st.sampled_from([0.0, 0.5, 1.0]), seed=st.integers(0, 2**16))
def test_masked_actions_are_always_legal(dqn, ppo, mask, eps, seed):
    mask = np.array(mask, dtype=bool)
    n, a = mask.shape
    obs = np.random.default_rng(seed).normal(size=(n, 3)).astype(np.float32)
    picks = {
        "dqn collect": dqn[a].collect_mode.forward(obs, eps=eps, mask=mask),
        "dqn eval": dqn[a].eval_mode.forward(obs, mask=mask),
        "ppo collect": ppo[a].collect_mode.forward(obs, mask=mask)["action"],
        "ppo eval": ppo[a].eval_mode.forward(obs, mask=mask),
        "random bot": create_bot("random", seed=seed).forward(obs, mask=mask),
        "first_legal bot": create_bot("first_legal").forward(obs, mask=mask),
    }
    for name, actions in picks.items():
        assert mask[np.arange(n), actions].all(), f"{name} played an illegal action: {actions} under {mask}"


def test_dqn_target_uses_only_legal_next_actions():
    cfg = compile_config({"policy": {"model": {"hidden_size_list": [8], "dueling": False}, "learn": {"double": False}}})
    policy = create_policy(cfg.policy, 2, 3, seed=0)
    obs = np.zeros((1, 2), dtype=np.float32)
    with_all = policy.target_network(__import__("torch").as_tensor(obs)).detach().numpy()[0]
    worst = int(np.argmin(with_all))
    batch = {
        "obs": obs,
        "next_obs": obs,
        "action": np.zeros(1, np.int64),
        "reward": np.zeros(1, np.float32),
        "done": np.zeros(1, bool),
        "discount": np.ones(1, np.float32),
    }
    mask = np.zeros((1, 3), dtype=bool)
    mask[0, worst] = True
    q_before = policy.model(__import__("torch").as_tensor(obs)).detach().numpy()[0, 0]
    info = policy.forward_learn({**batch, "next_action_mask": mask})
    # td_error = |target - q| with target = Q_target(s', worst legal action)
    assert float(info["td_error"]) == pytest.approx(abs(with_all[worst] - q_before), rel=1e-5)


# ---- battle collectors --------------------------------------------------------------------------
def test_sample_collector_exact_rows_per_trained_player():
    first = create_bot("first_legal")
    collector = BattleSampleSerialCollector(
        EasyDict(trained_players=[0, 1]), countdown(2, start=5), [first, first], discount_factor=0.9
    )
    data = collector.collect(n_sample=7)
    assert [len(d["obs"]) for d in data] == [7, 7]
    stats = collector.last_stats
    # countdown(5) with "take 1" lasts 5 moves (seat 0: moves 1, 3, 5; seat 1: 2, 4). A move's row is complete
    # when its seat is to move again, the last two at the game's end: steps 1-5 of a game complete 0, 1, 1, 1, 2
    # rows. Player 0 is seat 0 in env 0 and seat 1 in env 1, then they swap. After step 5 each player has 5 rows;
    # game 2 adds one each at step 7 and at step 8: 8 vector steps of 2 games = 16 moves
    assert stats.env_steps == collector.envstep == 16
    assert all(length == 5 for length in stats.lengths)
    assert set(stats.outcomes) <= {"win", "loss"}
    for d in data:
        assert d["next_action_mask"].shape == (7, 2) and d["discount"].tolist() == [pytest.approx(0.9)] * 7
        assert set(np.unique(d["reward"])) <= {-1.0, 0.0, 1.0}
        # rows that end a game have no legal next action and are done
        assert (d["done"] == ~d["next_action_mask"].any(axis=1)).all()
    second = collector.collect(n_sample=7)
    assert [len(d["obs"]) for d in second] == [7, 7]
    # steps 9-10 end game 2 (3 rows each), game 3 gives 3 rows each by step 14 and 5 at step 15: 7 more steps
    assert collector.envstep == 30 and collector.last_stats.episodes == 4
    collector.close()


def test_sample_collector_only_trained_player_rows():
    first = create_bot("first_legal")
    collector = BattleSampleSerialCollector(None, countdown(1, start=5), [first, first])
    data = collector.collect(n_sample=4)
    assert len(data[0]["obs"]) == 4 and data[1] == {}
    # player 0 is seat 0 in game 1 (moves 1, 3, 5: 3 rows at its end, move 5), then seat 1 in game 2: its
    # move 2 (move 7 overall) is complete when it is to move again, after move 8
    assert collector.envstep == 8 and collector.last_stats.episodes == 1
    assert collector.last_stats.outcomes == ["win"] and collector.last_stats.seats == [0]
    collector.collect(n_sample=1)  # move 4 of game 2 is complete at the game's end (move 10), a loss
    assert collector.envstep == 10 and collector.last_stats.outcomes == ["loss"]
    assert collector.last_stats.seats == [1]
    collector.close()


def test_episode_collector_exact_games_and_rows():
    first = create_bot("first_legal")
    collector = BattleEpisodeSerialCollector(EasyDict(trained_players=[0, 1]), countdown(2, start=5), [first, first])
    games = collector.collect(n_episode=3)
    assert len(games[0]) == len(games[1]) == 3
    # every game: 5 moves, seat 0 (3 rows) and seat 1 (2 rows); the last row of each player is done
    for g0, g1 in zip(*games):
        assert sorted([len(g0["obs"]), len(g1["obs"])]) == [2, 3]
        assert g0["done"][-1] and g1["done"][-1] and not g0["done"][:-1].any()
        assert sorted([g0["reward"][-1], g1["reward"][-1]]) == [-1.0, 1.0]
    assert collector.last_stats.episodes == 4  # both envs finish a game at the same step: one kept for later
    assert len(collector.collect(n_episode=1)[0]) == 1
    assert collector.last_stats.episodes == 0  # the surplus game, no new move
    collector.reset_env()
    assert collector.envstep == 20  # 4 games of 5 moves
    collector.close()


def test_sample_collector_nstep_rows_exact():
    """countdown(5), both players take 1: seat 0 moves at counters 5, 3, 1 (and wins), seat 1 at 4, 2.
    With nstep=2 a row spans two of the player's own moves: its view then, after the opponent replied."""
    first = create_bot("first_legal")
    collector = BattleSampleSerialCollector(
        EasyDict(trained_players=[0, 1]), countdown(1, start=5), [first, first], discount_factor=0.9, nstep=2
    )
    data = collector.collect(n_sample=2, keep_extra=True)
    seat0, seat1 = data  # game 1: player 0 sits in seat 0
    # obs = [counter / 5, moves / 100]
    np.testing.assert_allclose(seat0["obs"], [[1.0, 0.0], [0.6, 0.02]])
    np.testing.assert_allclose(seat0["next_obs"], [[0.2, 0.04], [0.0, 0.05]])  # its 3rd turn; the end
    np.testing.assert_allclose(seat0["reward"], [0.0, 0.9 * 1.0])  # the win, one own move later
    assert seat0["done"].tolist() == [False, True]
    np.testing.assert_allclose(seat0["discount"], [0.81, 0.81])
    assert seat0["next_action_mask"].tolist() == [[True, False], [False, False]]  # counter 1: take 1 only
    np.testing.assert_allclose(seat1["obs"], [[0.8, 0.01], [0.4, 0.03]])
    np.testing.assert_allclose(seat1["next_obs"], [[0.0, 0.05], [0.0, 0.05]])  # the loss ends both windows
    np.testing.assert_allclose(seat1["reward"], [0.9 * -1.0, -1.0])
    assert seat1["done"].tolist() == [True, True]
    np.testing.assert_allclose(seat1["discount"], [0.81, 0.9])
    # it steps until each player has n_sample + (nstep - 1) moves per game in (the single-agent bound: at most
    # nstep - 1 of a game's moves are in open windows): player 1's 3rd move is its first of game 2 (move 6, in
    # seat 0), handed out when it is to move again after move 7
    assert collector.envstep == 7
    # keep_extra=True: the surplus row of player 0 (its last move, a 1-step window: the game ended) comes first next time
    more = collector.collect(n_sample=1)
    np.testing.assert_allclose(more[0]["obs"], [[0.2, 0.04]])
    np.testing.assert_allclose(more[0]["reward"], [1.0])
    assert more[0]["done"].tolist() == [True] and more[0]["discount"].tolist() == [pytest.approx(0.9)]
    collector.close()


def test_episode_collector_nstep_rows_exact():
    first = create_bot("first_legal")
    collector = BattleEpisodeSerialCollector(
        EasyDict(trained_players=[0, 1]), countdown(1, start=5), [first, first], discount_factor=0.5, nstep=3
    )
    (g0,), (g1,) = collector.collect(n_episode=1)
    # player 0 (seat 0) wins: rewards 0, 0, 1 over its three moves
    np.testing.assert_allclose(g0["reward"], [0.25, 0.5, 1.0])
    np.testing.assert_allclose(g0["discount"], [0.125, 0.25, 0.5])
    np.testing.assert_allclose(g0["next_obs"], [[0.0, 0.05]] * 3)
    assert g0["done"].tolist() == [True, True, True]
    np.testing.assert_allclose(g1["reward"], [-0.5, -1.0])
    np.testing.assert_allclose(g1["discount"], [0.25, 0.5])
    collector.close()


def test_truncated_game_rows_bootstrap_in_nstep_windows():
    first = create_bot("first_legal")
    # max_moves=3: the game is cut short as a draw after 3 moves (seat 0 moved twice, seat 1 once)
    collector = BattleEpisodeSerialCollector(
        EasyDict(trained_players=[0, 1]),
        countdown(1, start=5, max_moves=3),
        [first, first],
        discount_factor=0.5,
        nstep=2,
    )
    (g0,), (g1,) = collector.collect(n_episode=1)
    np.testing.assert_allclose(g0["reward"], [0.0, 0.0])
    assert g0["done"].tolist() == [False, False]  # truncated: the target still bootstraps from next_obs
    np.testing.assert_allclose(g0["discount"], [0.25, 0.5])  # the window ends with the game
    assert g1["done"].tolist() == [False] and g1["discount"].tolist() == [0.5]
    collector.close()


def test_collectors_pass_policy_kwargs_to_trained_players_only():
    class Recorder:
        def __init__(self):
            self.kwargs = []

        def forward(self, obs, mask=None, **kwargs):
            self.kwargs.append(kwargs)
            return np.argmax(mask, axis=1)

    trained, opponent = Recorder(), Recorder()
    collector = BattleSampleSerialCollector(None, countdown(2), [trained, opponent])
    collector.collect(n_sample=3, policy_kwargs={"eps": 0.5})
    assert trained.kwargs and all(k == {"eps": 0.5} for k in trained.kwargs)
    assert opponent.kwargs and all(k == {} for k in opponent.kwargs)
    collector.close()


# ---- battle evaluator ---------------------------------------------------------------------------
def test_evaluator_exact_rates_with_scripted_players():
    env = countdown(2, start=5)
    evaluator = BattleInteractionSerialEvaluator(
        None,
        env,
        PerfectCountdownPlayer(5),
        {"first_legal": create_bot("first_legal")},
        stop_value=1.0,
        n_evaluator_episode=4,
    )
    stop, info = evaluator.eval()
    assert info["results"]["first_legal"] == {
        "first": {"win": 1.0, "draw": 0.0, "loss": 0.0, "games": 4},
        "second": {"win": 1.0, "draw": 0.0, "loss": 0.0, "games": 4},
    }
    assert stop and info["win_rate"] == {"first_legal": 1.0}
    assert evaluator.envstep > 0
    evaluator.close()


def test_evaluator_first_legal_mirror_and_draws():
    first = create_bot("first_legal")
    evaluator = BattleInteractionSerialEvaluator(
        None, countdown(2, start=5), first, {"first_legal": first}, stop_value=0.5, n_evaluator_episode=2
    )
    stop, info = evaluator.eval()
    # "take 1" against "take 1": the first mover makes the 5th move and wins
    assert info["results"]["first_legal"]["first"]["win"] == 1.0
    assert info["results"]["first_legal"]["second"]["loss"] == 1.0
    assert info["win_rate"]["first_legal"] == 0.5 and stop
    evaluator.close()
    drawn = BattleInteractionSerialEvaluator(
        None, countdown(2, start=5, max_moves=3), first, {"first_legal": first}, stop_value=0.5, n_evaluator_episode=2
    )
    stop, info = drawn.eval()
    assert info["results"]["first_legal"]["first"] == {"win": 0.0, "draw": 1.0, "loss": 0.0, "games": 2}
    assert not stop
    drawn.close()


def test_evaluator_side_bounds_block_the_stop():
    first = create_bot("first_legal")
    cfg = EasyDict(max_loss_rate=dict(first=1.0, second=0.0))
    evaluator = BattleInteractionSerialEvaluator(
        cfg, countdown(2, start=5), first, {"first_legal": first}, stop_value=0.5, n_evaluator_episode=2
    )
    stop, info = evaluator.eval()
    assert info["win_rate"]["first_legal"] == 0.5 and not stop  # loses every game as second mover
    evaluator.close()
    cfg = EasyDict(min_mean_win_rate={"perfect": 0.5})
    evaluator = BattleInteractionSerialEvaluator(
        cfg,
        countdown(2, start=5),
        first,
        {"first_legal": first, "perfect": PerfectCountdownPlayer(5)},
        stop_value=0.5,
        n_evaluator_episode=2,
    )
    stop, info = evaluator.eval()
    assert info["win_rate"] == {"first_legal": 0.5, "perfect": 0.0} and not stop  # the other opponent's bound
    evaluator.close()


def test_lookahead_bot_wins_and_blocks_tictactoe():
    from parallel_rl.envs.multiagent import make_game

    game = make_game(EasyDict(env_id="pettingzoo.classic.tictactoe_v3"))
    game.reset(seed=0)
    bot = create_bot("lookahead", seed=0)
    # first mover takes cells 0 and 1 (one column of the board); the second mover 3; then the first mover can win
    for move in (0, 3, 1, 4):
        game.play(move)
    obs, mask, *_ = game.last()
    assert int(bot.forward(obs[None], mask[None], games=[game])[0]) == 2  # win at once
    game.reset(seed=0)
    for move in (0, 3, 1):
        game.play(move)
    obs, mask, *_ = game.last()
    assert int(bot.forward(obs[None], mask[None], games=[game])[0]) == 2  # block the first mover
    game.close()


def test_lookahead_bot_blocks_connect_four():
    """Connect Four scores a win against the agent its turn order names next: a block check must set it too."""
    from parallel_rl.envs.multiagent import make_game

    game = make_game(EasyDict(env_id="pettingzoo.classic.connect_four_v3"))
    game.reset(seed=0)
    for move in (0, 1, 0, 1, 0):  # the first mover has three in column 0
        game.play(move)
    obs, mask, *_ = game.last()
    assert int(create_bot("lookahead", seed=0).forward(obs[None], mask[None], games=[game])[0]) == 0
    game.close()
