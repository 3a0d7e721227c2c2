"""Learning curves on MuJoCo (or any env a config names): eval return against env steps and wall seconds.

    .venv/bin/python benchmarks/mujoco.py -c configs/halfcheetah_sac_parallel.py --seeds 0 1 2 \
        [--max-env-step 100000] [--collectors 1] [--out benchmarks/results] [--target 5000]
    .venv/bin/python benchmarks/mujoco.py -c configs/halfcheetah_sac.py --plot-only   # redraw from the CSV

The curve machinery (a fresh ``serial`` / ``run`` process per seed, the curve from what the product records,
``OUT/<config>.csv`` and ``.png``, a table at the reference step counts) is ``benchmarks/curves.py``, shared
with ``benchmarks/pixels.py --curve``. References (eval return at env steps) are the ones cited in configs' docstrings and in issue #24.
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from curves import main  # noqa: E402  (the shared curve runner)

# (policy type, env name prefix) -> source -> [(env steps, eval return)]
REFERENCES = {
    ("sac", "HalfCheetah"): {
        "RL Zoo (SB3, 1 run)": [(100_000, 4961), (300_000, 7197), (1_000_000, 9537)],
        "tianshou (10 seeds)": [(100_000, 6515), (300_000, 9059), (1_000_000, 12122)],
    },
    ("td3", "HalfCheetah"): {"TD3 authors": [(100_000, 5514), (300_000, 7697), (1_000_000, 9567)]},
    ("sac", "Hopper"): {"tianshou (10 seeds)": [(100_000, 2613), (300_000, 3388), (1_000_000, 3532)]},
    ("ppo", "Hopper"): {"RL Zoo": [(1_000_000, 2410)], "CleanRL": [(1_000_000, 2383)]},
}


if __name__ == "__main__":
    sys.exit(main(REFERENCES, __doc__.splitlines()[0]))
