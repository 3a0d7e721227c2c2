"""HalfCheetah-v5 SAC on a local cluster with tianshou's MuJoCo SAC settings (``examples/mujoco/mujoco_sac.py``,
the source of its benchmark table: 6,515 at 100k env steps, 10 seeds): actor and critic learning rate 1e-3, a
fixed temperature 0.2; the rest (256x256 networks, batch 256, Polyak 0.005, gamma 0.99, one update per env step,
10k env steps of random actions first) is also RL Zoo's, as ``halfcheetah_sac_parallel.py``."""

import copy
import os
import runpy

main_config = copy.deepcopy(
    runpy.run_path(os.path.join(os.path.dirname(__file__), "halfcheetah_sac_parallel.py"))["main_config"]
)
main_config["exp_name"] = "halfcheetah_sac_tianshou_parallel"
learn = main_config["policy"]["learn"]
learn.update(learning_rate_policy=1e-3, learning_rate_q=1e-3, auto_alpha=False, init_alpha=0.2)
