"""``parallel_rl_test/Broken-v0``: the toy Counting env whose every step fails alike, so that every collector task
fails with the same error (a deterministic failure, as a checkpoint that does not fit the model is). Imported by
the processes of a test run through ``env.import_names``."""

import gymnasium as gym

from parallel_rl.envs.toy import CountingEnv


class BrokenEnv(CountingEnv):
    def step(self, action):
        raise RuntimeError(f"the broken env fails at step {self._t + 1} (a test)")


if "parallel_rl_test/Broken-v0" not in gym.registry:
    gym.register(id="parallel_rl_test/Broken-v0", entry_point=BrokenEnv)
