"""``parallel_rl_test/Slow-v0``: the toy Counting env whose constructor takes ``build_seconds`` (a heavy env: an
emulator loading its ROM, a simulator compiling its scene on a loaded box), so that a worker's set-up outlasts the
coordinator's connect timeout. Imported by the processes of a test run through ``env.import_names``."""

import time

import gymnasium as gym

from parallel_rl.envs.toy import CountingEnv


class SlowEnv(CountingEnv):
    def __init__(self, episode_length: int = 10, build_seconds: float = 3.0):
        time.sleep(build_seconds)  # the slow constructor this env stands for, not a wait for another process
        super().__init__(episode_length)


if "parallel_rl_test/Slow-v0" not in gym.registry:
    gym.register(id="parallel_rl_test/Slow-v0", entry_point=SlowEnv)
