import numpy as np
import pytest

from parallel_rl.envs import EnvManager
from parallel_rl.errors import ConfigError


def test_picks_native_vector_env_for_cartpole():
    with EnvManager("CartPole-v1", 3, seed=0) as env:
        assert env.vector_mode == "vector_entry_point"
        assert env.obs_shape == (4,) and env.action_num == 2
        obs = env.reset()
        assert obs.shape == (3, 4) and obs.dtype == np.float32


def test_falls_back_to_sync_without_vector_entry_point(toy_env):
    assert toy_env.vector_mode == "sync"


def test_episode_bookkeeping_and_autoreset(toy_env):
    toy_env.reset()
    ones = np.ones(4, dtype=np.int64)
    for _ in range(4):
        step = toy_env.step(ones)
        assert step.valid.all() and not step.done.any()
    step = toy_env.step(ones)  # 5th step ends every episode
    assert step.terminated.all()
    assert np.all(step.episode_return == 5.0) and np.all(step.episode_length == 5)
    step = toy_env.step(ones)  # auto-reset step: no transition
    assert not step.valid.any() and not step.done.any()
    assert np.all(np.isnan(step.episode_return))
    step = toy_env.step(ones)
    assert step.valid.all()


def test_seeding_is_reproducible():
    with EnvManager("CartPole-v1", 2, seed=3) as a, EnvManager("CartPole-v1", 2, seed=3) as b:
        np.testing.assert_array_equal(a.reset(), b.reset())


def test_rejects_unknown_env_and_unsupported_spaces():
    with pytest.raises(ConfigError, match="not a registered"):
        EnvManager("NoSuchEnv-v9", 1)
    with pytest.raises(ConfigError, match=r"'parallel_rl/Spaces-v0' has action space MultiDiscrete.*Discrete.*dqn"):
        EnvManager("parallel_rl/Spaces-v0", 1, env_kwargs={"action_space": "multidiscrete"})
    with pytest.raises(ConfigError, match=r"'parallel_rl/Spaces-v0' has observation space Dict.*only Box"):
        EnvManager("parallel_rl/Spaces-v0", 1, env_kwargs={"obs_space": "dict"})


def test_box_actions_are_clipped_to_the_space_and_box_obs_keep_their_shape():
    with EnvManager("parallel_rl/Spaces-v0", 2, env_kwargs={"obs_space": "box2d", "action_space": "box"}) as env:
        assert env.action_spec.kind == "box" and env.action_spec.shape == (2,) and env.obs_dim == 6
        assert env.reset().shape == (2, 2, 3)
        step = env.step(np.array([[5.0, 0.5], [-5.0, 0.5]], dtype=np.float32))
        # clipped to [-1, 1]: -|1 - 0.5| - 0 and -|-1 - 0.5| - 0
        np.testing.assert_allclose(step.reward, [-0.5, -1.5])


def test_async_mode_works(toy_env):
    with EnvManager("parallel_rl/Counting-v0", 2, vector_mode="async", env_kwargs={"episode_length": 3}) as env:
        env.reset()
        returns = []
        for _ in range(4):
            step = env.step(np.ones(2, dtype=np.int64))
            returns += step.episode_return[step.done].tolist()
        assert returns == [3.0, 3.0]
