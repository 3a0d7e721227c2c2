"""``parallel_rl_test/Flat-v0``: the toy Counting env whose every step earns ``reward`` whatever the action, so an
evaluation's return is exactly ``reward * episode_length`` from the first one on (a learning curve known in
advance: the lab's pruning tests). Imported by the processes of a test run through ``env.import_names``."""

import gymnasium as gym

from parallel_rl.envs.toy import CountingEnv


class FlatEnv(CountingEnv):
    def __init__(self, episode_length: int = 5, reward: float = 1.0):
        super().__init__(episode_length)
        self.reward = float(reward)

    def step(self, action):
        obs, _, terminated, truncated, info = super().step(action)
        return obs, self.reward, terminated, truncated, info


if "parallel_rl_test/Flat-v0" not in gym.registry:
    gym.register(id="parallel_rl_test/Flat-v0", entry_point=FlatEnv)
