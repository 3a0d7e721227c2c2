"""Reference curve: Stable-Baselines3's SAC on HalfCheetah-v5 with RL Zoo's settings (SB3 defaults plus
learning_starts 10000), 5 deterministic evaluation episodes every 5,000 env steps, one torch thread: the
curve ``configs/halfcheetah_sac.py`` is compared with on the same box (docs/benchmarks.md).

SB3 is not a dependency of the project; install it beside the venv, without touching it:

    .venv/bin/pip install --target /tmp/sb3lib --no-deps stable-baselines3 pandas python-dateutil pytz tzdata
    PYTHONPATH=/tmp/sb3lib .venv/bin/python benchmarks/sb3_sac_reference.py [ENV_STEPS]
"""
import sys, time
import gymnasium as gym
import numpy as np
import torch
from stable_baselines3 import SAC
from stable_baselines3.common.evaluation import evaluate_policy

torch.set_num_threads(1)
steps = int(sys.argv[1]) if len(sys.argv) > 1 else 50_000
env = gym.make("HalfCheetah-v5")
model = SAC("MlpPolicy", env, learning_starts=10_000, seed=0, device="cpu", verbose=0)
eval_env = gym.make("HalfCheetah-v5")
start = time.time()
done = 0
while done < steps:
    model.learn(5000, reset_num_timesteps=False)
    done += 5000
    mean, _ = evaluate_policy(model, eval_env, n_eval_episodes=5, deterministic=True)
    print(f"sb3 env_steps={done} eval_return={mean:.1f} wall={time.time() - start:.0f}s ent_coef={float(model.log_ent_coef.exp()):.4f}", flush=True)
