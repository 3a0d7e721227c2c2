"""`parallel-rl eval` against a bare gymnasium loop with the same network, and what --video costs.

    .venv/bin/python benchmarks/eval_speed.py [--checkpoint PATH] [--episodes 1000] [--repeats 3]

The network is a CartPole DQN (configs/cartpole_dqn.py): the given checkpoint's, else one trained here
to the stop value (a few seconds). Measured, median of --repeats:
  eval      the `eval` command's evaluation (parallel_rl.after.evaluate.evaluate_policy: the pipelines'
            evaluator over env.evaluator_env_num vector envs), counting the reported episodes' steps only
  bare      a plain gymnasium loop: one env, `argmax(q(obs))` per step, no parallel_rl code
  bare-vec  gymnasium's vector env with the same number of envs, one batched forward per step
            (both bare loops play --bare-episodes, 100: their rate per env step is what is compared, and the
            one-env loop would take minutes for 1,000 episodes of 500 steps)
  video     the wall time of the `eval` command (parallel_rl.cli.main, in this process: without the
            interpreter's start and imports, which would only dilute the share) with `--video DIR` (one
            episode) and without, the same checkpoint, episodes and seed, interleaved; the video's share is
            (with - without) / with, of the medians (and the median of each back-to-back pair's share)
Target: eval >= 0.8x bare env steps/s; video <= 5 % of `eval --video`'s wall time.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time

import gymnasium as gym
import numpy as np
import torch

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

from parallel_rl.after.checkpoints import build_policy, find_checkpoint, read_checkpoint  # noqa: E402
from parallel_rl.after.evaluate import evaluate_policy  # noqa: E402
from parallel_rl.config import load_config  # noqa: E402
from parallel_rl.runtime import set_torch_threads  # noqa: E402

CONFIG = os.path.join(REPO, "configs", "cartpole_dqn.py")


def bare_loop(q_network, episodes: int, seed: int) -> tuple:
    """(env steps, seconds) of ``episodes`` greedy episodes on one CartPole-v1."""
    env = gym.make("CartPole-v1")
    steps, start = 0, time.perf_counter()
    with torch.no_grad():
        for episode in range(episodes):
            obs, _ = env.reset(seed=seed + episode)
            done = False
            while not done:
                action = int(q_network(torch.as_tensor(obs, dtype=torch.float32)[None]).argmax(-1))
                obs, _, terminated, truncated, _ = env.step(action)
                steps += 1
                done = terminated or truncated
    env.close()
    return steps, time.perf_counter() - start


def bare_vector_loop(q_network, episodes: int, num_envs: int, seed: int) -> tuple:
    """(env steps, seconds) until ``episodes`` episodes ended on gymnasium's CartPole vector env."""
    env = gym.make_vec("CartPole-v1", num_envs=num_envs, vectorization_mode="vector_entry_point")
    obs, _ = env.reset(seed=seed)
    steps, ended, start = 0, 0, time.perf_counter()
    skip = np.zeros(num_envs, dtype=bool)  # the auto-reset step after an episode's end is no transition
    with torch.no_grad():
        while ended < episodes:
            actions = q_network(torch.as_tensor(obs, dtype=torch.float32)).argmax(-1).numpy()
            obs, _, terminated, truncated, _ = env.step(actions)
            steps += int((~skip).sum())
            done = (terminated | truncated) & ~skip
            ended += int(done.sum())
            skip = done
    env.close()
    return steps, time.perf_counter() - start


def trained_checkpoint(tmp: str) -> str:
    exp = os.path.join(tmp, "cartpole_dqn")
    env = {**os.environ, "PYTHONPATH": REPO}
    subprocess.run(
        [sys.executable, "-m", "parallel_rl", "serial", "-c", CONFIG, "--set", f"exp_name={exp}"],
        check=False,
        env=env,
        stdout=subprocess.DEVNULL,
    )
    return exp


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--checkpoint", default=None)
    parser.add_argument("--episodes", type=int, default=1000)
    parser.add_argument("--bare-episodes", type=int, default=100)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        cfg = load_config(CONFIG)
        set_torch_threads(cfg.system.torch_num_threads)
        checkpoint = (
            read_checkpoint(args.checkpoint) if args.checkpoint else find_checkpoint(cfg, run=trained_checkpoint(tmp))
        )
        policy = build_policy(cfg, checkpoint)
        print(f"network: {checkpoint.source}; {args.episodes} episodes, median of {args.repeats}")
        rates = {"eval": [], "bare": [], "bare-vec": []}
        eval_seconds, returns = [], []
        for r in range(args.repeats):
            info = evaluate_policy(cfg, policy, args.episodes, seed=1000 * r)
            # only the steps of the episodes it reports: an env that has played its share keeps stepping until
            # the last one has, and those steps count in info["env_steps"] but are no use
            rates["eval"].append(info["episodes"] * info["episode_length_mean"] / info["duration"])
            eval_seconds.append(info["duration"])
            returns.append(info["eval_episode_return_mean"])
            steps, seconds = bare_loop(policy.model, args.bare_episodes, seed=1000 * r)
            rates["bare"].append(steps / seconds)
            steps, seconds = bare_vector_loop(policy.model, args.bare_episodes, cfg.env.evaluator_env_num, 1000 * r)
            rates["bare-vec"].append(steps / seconds)
        median = {k: statistics.median(v) for k, v in rates.items()}
        print(f"mean return {statistics.median(returns):.1f}; evaluation wall {statistics.median(eval_seconds):.2f}s")
        for name, value in median.items():
            print(f"{name:>9}: {value:10,.0f} env steps/s")
        print(f"eval / bare     = {median['eval'] / median['bare']:.2f}x (target >= 0.8x)")
        print(f"eval / bare-vec = {median['eval'] / median['bare-vec']:.2f}x")
        try:
            import imageio_ffmpeg  # noqa: F401
        except ImportError:
            return
        video_share(checkpoint.source, args.episodes, args.repeats, tmp)


def eval_wall(argv: list) -> dict:
    """One `parallel-rl eval --json`: its wall seconds, its evaluation's (the JSON's), and the CPU seconds of this
    process's children while it ran (the recording process and its ffmpeg)."""
    from parallel_rl.cli import main as cli

    def children_cpu() -> float:
        usage = resource.getrusage(resource.RUSAGE_CHILDREN)
        return usage.ru_utime + usage.ru_stime

    start, cpu = time.perf_counter(), children_cpu()
    with contextlib.redirect_stdout(io.StringIO()) as out:
        code = cli(["--json", *argv])
    if code != 0:
        raise SystemExit(f"parallel-rl {' '.join(argv)} exited {code}")
    return {
        "wall": time.perf_counter() - start,
        "evaluation": json.loads(out.getvalue())["seconds"],
        "recorder_cpu": children_cpu() - cpu,
    }


def video_share(checkpoint: str, episodes: int, repeats: int, tmp: str) -> None:
    """`eval` with and without `--video`, interleaved; medians and the video's share of the wall time."""

    def command(n: int, video: bool) -> list:
        return ["eval", "-c", CONFIG, "--checkpoint", checkpoint, "--episodes", str(n), "--seed", "0"] + (
            ["--video", os.path.join(tmp, "videos")] if video else []
        )

    for video in (False, True):  # the command's first imports (the CLI, imageio-ffmpeg) go untimed
        eval_wall(command(10, video))
    runs = {False: [], True: []}
    for r in range(repeats):  # which goes first alternates: a drift in the box's load hits both alike
        for video in (False, True) if r % 2 == 0 else (True, False):
            runs[video].append(eval_wall(command(episodes, video)))
    without, with_video = (
        {key: statistics.median(run[key] for run in runs[video]) for key in runs[video][0]} for video in (False, True)
    )
    share = (with_video["wall"] - without["wall"]) / with_video["wall"]
    pairs = ", ".join(f"{a['wall']:.2f}/{b['wall']:.2f}" for a, b in zip(runs[False], runs[True]))
    print(f"eval {without['wall']:.2f}s, eval --video {with_video['wall']:.2f}s (medians of {repeats}; all: {pairs})")
    print(
        f"  of which the evaluation {without['evaluation']:.2f}s / {with_video['evaluation']:.2f}s; the recording "
        f"process and its ffmpeg used {with_video['recorder_cpu']:.2f}s of CPU beside it"
    )
    # each pair ran back to back: the median of the pairs' shares sheds a load spike that hit one run of a pair
    paired = statistics.median((b["wall"] - a["wall"]) / b["wall"] for a, b in zip(runs[False], runs[True]))
    print(
        f"video of 1 episode: {100 * share:.1f}% of `eval --video` wall time (target <= 5%); the median of the "
        f"pairs' shares {100 * paired:.1f}%"
    )


if __name__ == "__main__":
    main()
