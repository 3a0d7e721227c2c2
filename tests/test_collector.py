import numpy as np
import pytest

from parallel_rl.envs import EnvManager
from parallel_rl.worker import EpisodeSerialCollector, SampleSerialCollector, create_serial_collector


def test_sample_collector_returns_exactly_n_sample(toy_env, constant_policy):
    collector = SampleSerialCollector(None, toy_env, constant_policy, nstep=1)
    data = collector.collect(n_sample=7, train_iter=3, policy_kwargs={"eps": 0.5}, keep_extra=True)
    assert len(data["action"]) == 7
    assert collector.envstep == 8  # two vector steps of 4 envs
    assert collector.last_stats.env_steps == 8 and collector.last_stats.transitions == 7
    assert np.all(data["collect_iter"] == 3)
    assert constant_policy.calls[0] == {"eps": 0.5}
    # keep_extra=True: the surplus row is served first next time, without stepping
    data = collector.collect(n_sample=1)
    assert len(data["action"]) == 1 and collector.envstep == 8


def test_episode_boundaries_and_stats(toy_env, constant_policy):
    collector = SampleSerialCollector(None, toy_env, constant_policy, nstep=1)
    data = collector.collect(n_sample=40)  # 2 full episodes of 5 steps in each of 4 envs
    stats = collector.last_stats
    assert stats.episodes == 8 and stats.returns.tolist() == [5.0] * 8 and stats.lengths.tolist() == [5] * 8
    assert int(data["done"].sum()) == 8
    # 10 transitions per env, 2 auto-reset steps without transitions -> 12 vector steps
    assert collector.envstep == 40
    assert stats.speed > 0


def test_nstep_returns_and_discounts(constant_policy):
    env = EnvManager("parallel_rl/Counting-v0", 1, env_kwargs={"episode_length": 5})
    collector = SampleSerialCollector(None, env, constant_policy, nstep=3, discount_factor=0.5)
    data = collector.collect(n_sample=5)
    # first two from full windows, last three flushed at the episode end
    np.testing.assert_allclose(data["reward"], [1.75, 1.75, 1.75, 1.5, 1.0])
    np.testing.assert_allclose(data["discount"], [0.125, 0.125, 0.125, 0.25, 0.5])
    np.testing.assert_array_equal(data["done"], [False, False, True, True, True])
    # obs[:, 0] is t/5: transition t starts at t and bootstraps from min(t+3, 5)
    np.testing.assert_allclose(data["obs"][:, 0], [0.0, 0.2, 0.4, 0.6, 0.8])
    np.testing.assert_allclose(data["next_obs"][:, 0], [0.6, 0.8, 1.0, 1.0, 1.0])
    env.close()


def test_truncation_does_not_set_done():
    env = EnvManager("CartPole-v1", 1, seed=0, env_kwargs={"max_episode_steps": 3})

    class Alternate:
        t = 0

        def forward(self, obs, **kw):
            self.t += 1
            return np.array([self.t % 2])

    collector = SampleSerialCollector(None, env, Alternate(), nstep=1)
    data = collector.collect(n_sample=3)
    assert not data["done"].any()  # truncated at 3 steps, not terminated
    assert collector.last_stats.episodes == 1
    env.close()


def test_episode_collector_exact_episodes(toy_env, constant_policy):
    collector = EpisodeSerialCollector(None, toy_env, constant_policy)
    episodes = collector.collect(n_episode=3, drop_extra=True, keep_extra=True)
    assert len(episodes) == 3
    assert all(len(e["action"]) == 5 and e["done"][-1] and not e["done"][:-1].any() for e in episodes)
    # the 4th episode finished in the same step; keep_extra=True: it is returned next without stepping
    before = collector.envstep
    assert len(collector.collect(n_episode=1)) == 1 and collector.envstep == before


def test_reset_policy_and_env(toy_env, constant_policy):
    from tests.support import ConstantPolicy

    collector = create_serial_collector({"type": "sample"}, toy_env, constant_policy)
    collector.reset_policy(ConstantPolicy(0))
    data = collector.collect(n_sample=4)
    assert np.all(data["action"] == 0)
    env2 = EnvManager("parallel_rl/Counting-v0", 2, env_kwargs={"episode_length": 2})
    collector.reset_env(env2)
    collector.collect(n_sample=2)
    assert collector.env is env2
    collector.close()
    assert env2.closed


def test_invalid_arguments(toy_env, constant_policy):
    with pytest.raises(ValueError, match="nstep"):
        SampleSerialCollector(None, toy_env, constant_policy, nstep=0)
    collector = SampleSerialCollector(None, toy_env, constant_policy)
    with pytest.raises(ValueError, match="n_sample"):
        collector.collect(n_sample=0)


def test_zergling_collector_sees_new_checkpoints_on_the_disk(tmp_path):
    from parallel_rl.storage import SharedStorage
    from parallel_rl.collector.cluster import ClusterCollector
    from tests.support import toy_cluster_config

    cfg = toy_cluster_config(tmp_path)
    storage = SharedStorage(str(tmp_path / "shared"))
    collector = ClusterCollector(cfg, storage, seed=0)
    try:
        assert collector.get_policy_update_info() is None  # nothing published
        state = collector.policy.model_state_dict()
        storage.policies.save(20, state)
        assert collector.get_policy_update_info() == 20
        assert collector.update_policy(20) and collector.policy_version == 20
        assert collector.get_policy_update_info() is None  # nothing new since
        storage.policies.save(40, state)
        storage.prune_checkpoints(1)
        assert collector.get_policy_update_info() == 40
        assert collector.update_policy(40) and not collector.update_policy(20)  # never backwards
    finally:
        collector.close()


def test_cluster_collector_seeds_follow_the_run_seed_and_the_worker_id():
    """Each collector of a run draws its own env seeds (``seed + i`` for its envs), the same ones in a rerun with
    the same run seed, and other ones under another run seed (the process id it used before did neither)."""
    from parallel_rl.collector.shell import collector_seed

    names = [f"collector-{i}" for i in range(1, 33)]
    seeds = [collector_seed(0, name) for name in names]
    assert seeds == [collector_seed(0, name) for name in names]
    spans = sorted(seeds)
    assert min(b - a for a, b in zip(spans, spans[1:])) > 1_000  # 1,000 envs a collector never overlap
    first = EnvManager("CartPole-v1", 2, seed=seeds[0]).reset()
    assert np.array_equal(first, EnvManager("CartPole-v1", 2, seed=collector_seed(0, names[0])).reset())
    assert not np.array_equal(first, EnvManager("CartPole-v1", 2, seed=collector_seed(1, names[0])).reset())
    assert not np.array_equal(first, EnvManager("CartPole-v1", 2, seed=seeds[1]).reset())
