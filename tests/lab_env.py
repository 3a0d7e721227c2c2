"""``parallel_rl_test/Flat-v0``: the toy Counting env whose every step earns ``reward`` whatever the action, so an
evaluation's return is exactly ``reward * episode_length`` from the first one on (a learning curve known in
advance: the lab's pruning tests). ``fail_above``: a reward above it makes every step fail (a member of a population
whose training fails, by its draw). Imported by the processes of a test run through ``env.import_names``."""

import gymnasium as gym

from parallel_rl.envs.toy import CountingEnv


class FlatEnv(CountingEnv):
    def __init__(self, episode_length: int = 5, reward: float = 1.0, fail_above: float = float("inf")):
        super().__init__(episode_length)
        self.reward, self.fail_above = float(reward), float(fail_above)

    def step(self, action):
        if self.reward > self.fail_above:
            raise RuntimeError(f"the flat env fails: reward {self.reward:g} > fail_above {self.fail_above:g} (a test)")
        obs, _, terminated, truncated, info = super().step(action)
        return obs, self.reward, terminated, truncated, info


if "parallel_rl_test/Flat-v0" not in gym.registry:
    gym.register(id="parallel_rl_test/Flat-v0", entry_point=FlatEnv)
