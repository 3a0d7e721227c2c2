"""HalfCheetah-v5 TD3 on a local cluster with the TD3 paper's settings (Fujimoto et al. 2018, section 6.1 and
the authors' original ``TD3.py``, the source of the published learning curves): Adam at 1e-3 for actor and
critic, batch 100, 400x300 networks, 10k env steps of random actions first; the rest (Polyak 0.005, gamma 0.99,
policy delay 2, target noise 0.2 clipped at 0.5, exploration noise 0.1, one update per env step) is also
``halfcheetah_td3.py``'s (CleanRL's). The cluster settings are ``halfcheetah_td3_parallel.py``'s."""

import copy
import os
import runpy

main_config = copy.deepcopy(
    runpy.run_path(os.path.join(os.path.dirname(__file__), "halfcheetah_td3_parallel.py"))["main_config"]
)
main_config["exp_name"] = "halfcheetah_td3_paper_parallel"
main_config["policy"]["model"] = dict(actor_hidden_size_list=[400, 300], critic_hidden_size_list=[400, 300])
main_config["policy"]["learn"] = dict(batch_size=100, learning_rate_actor=1e-3, learning_rate_critic=1e-3)
