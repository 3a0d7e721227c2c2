"""Reference curve: Stable-Baselines3's SAC on a MuJoCo env, 5 deterministic evaluation episodes every 5,000 env
steps, one torch thread: the curves our SAC configs are compared with on the same box (docs/benchmarks.md).

Defaults are RL Zoo's HalfCheetah settings (SB3 defaults plus learning_starts 10000), compared with
``configs/halfcheetah_sac.py``. ``--lr 1e-3 --ent-coef 0.2`` gives tianshou's MuJoCo SAC settings (actor and
critic learning rate 1e-3, a fixed temperature 0.2), those of ``configs/*_sac_tianshou_parallel.py``.

(``-P``: benchmarks/mujoco.py would shadow the ``mujoco`` package.) SB3 is not a dependency of the project; install it beside the venv, without touching it:

    .venv/bin/pip install --target /tmp/sb3lib --no-deps stable-baselines3 pandas python-dateutil pytz tzdata
    PYTHONPATH=/tmp/sb3lib .venv/bin/python -P benchmarks/sb3_sac_reference.py [ENV_STEPS] [--env Hopper-v5]
        [--seed N] [--lr 1e-3] [--ent-coef 0.2]
"""

import argparse
import time

import gymnasium as gym
import torch
from stable_baselines3 import SAC
from stable_baselines3.common.evaluation import evaluate_policy

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("env_steps", type=int, nargs="?", default=50_000)
parser.add_argument("--env", default="HalfCheetah-v5")
parser.add_argument("--seed", type=int, default=0)
parser.add_argument("--lr", type=float, default=3e-4, help="actor and critic learning rate (SB3's default 3e-4)")
parser.add_argument("--ent-coef", default="auto", help="'auto' (learned, SB3's default) or a fixed temperature")
args = parser.parse_args()

torch.set_num_threads(1)
env = gym.make(args.env)
ent_coef = args.ent_coef if args.ent_coef == "auto" else float(args.ent_coef)
model = SAC(
    "MlpPolicy",
    env,
    learning_starts=10_000,
    learning_rate=args.lr,
    ent_coef=ent_coef,
    seed=args.seed,
    device="cpu",
    verbose=0,
)
eval_env = gym.make(args.env)
eval_env.reset(seed=args.seed + 10_000)
start = time.time()
done = 0
while done < args.env_steps:
    model.learn(5000, reset_num_timesteps=False)
    done += 5000
    mean, _ = evaluate_policy(model, eval_env, n_eval_episodes=5, deterministic=True)
    alpha = float(model.log_ent_coef.exp()) if args.ent_coef == "auto" else ent_coef
    print(
        f"sb3 env={args.env} seed={args.seed} env_steps={done} eval_return={mean:.1f} "
        f"wall={time.time() - start:.0f}s ent_coef={alpha:.4f}",
        flush=True,
    )
