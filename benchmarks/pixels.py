"""Pixels (#25): the image data path next to bare loops doing the same work, and learning curves.

    .venv/bin/python benchmarks/pixels.py [--seconds 10] [--only chunk collector minatar nature run] [--device cuda]
    .venv/bin/python benchmarks/pixels.py --curve -c configs/minatar_breakout_dqn_parallel.py --seeds 0 1 2 \
        [--max-env-step 1000000] [--collectors 1] [--out benchmarks/results] [--target 9]

- chunk: bytes per transition of the chunks a Pong collector writes (DQN's parallel config with 8 envs: stacks
  of 4, 3-step rows, 640-row chunks; frames stored once, ``parallel_rl.data.frames``). Target <= 8,500 (1.2 frames).
- run: bytes per transition of the chunks a real ``parallel-rl run`` writes (issue 43 item 7): configs/pong_dqn_parallel.py
  and configs/pong_ppo_parallel.py as shipped, 1 collector, ``--run-env-steps`` (4,000) env steps, the bytes of
  every chunk file it wrote over their rows (its store watched while it runs: PPO's chunks leave the store once
  trained on); and again with 64-row chunks
  (``parallel.collector.chunk_size=64``, as short as a learner-paced collector cuts them). Target <= 8,500 each.
- collector: env steps/s of a ClusterCollector on Pong (pong_dqn_parallel.py, 8 envs, the Nature CNN acting,
  epsilon 0.05), with and without writing its chunks, vs a bare loop of the same vector env (ALE's
  AtariVectorEnv, same preprocessing) and the same CNN forward, writing obs/next_obs rows to numpy arrays.
  Target >= 0.85.
- minatar / nature: DQN learner updates/s (uniform replay sample + BaseLearner.train; MinAtar's network on
  Breakout's bool boards, batch 32 / the Nature CNN on 4x84x84 uint8 stacks, batch 32) vs a bare torch loop of
  the same update (the same layers written inline, Adam, Huber loss, target network). Target >= 0.9.
  ``--device cuda`` runs both sides of these two pairs on the GPU (the collector stays on the CPU): run it once
  with and once without for the learner's GPU / CPU figure.

Each pair is measured in two alternating rounds (bare, library, bare, library) of ``--seconds / 2`` each, one
torch thread (the product's default), and the ratio is of the summed rates: the box's load drifts.

``--curve``: the curve runner of ``benchmarks/curves.py`` (as ``benchmarks/mujoco.py``) with the pixel references
below (Young & Tian 2019's DQN, read off their figures, returns over training episodes; gymnax-blines' PPO).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from typing import Callable, Tuple

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# (policy type, env id prefix) -> source -> [(env steps, return)]
REFERENCES = {
    ("dqn", "MinAtar/Breakout"): {"Young & Tian 2019": [(1_000_000, 9), (5_000_000, 10)]},
    ("dqn", "MinAtar/SpaceInvaders"): {"Young & Tian 2019": [(1_000_000, 31), (5_000_000, 43)]},
    ("dqn", "MinAtar/Freeway"): {"Young & Tian 2019": [(1_000_000, 48), (5_000_000, 50)]},
    ("dqn", "MinAtar/Asterix"): {"Young & Tian 2019": [(1_000_000, 5), (5_000_000, 17)]},
    ("dqn", "MinAtar/Seaquest"): {"Young & Tian 2019": [(1_000_000, 1), (5_000_000, 20)]},
    ("ppo", "MinAtar/Breakout"): {"gymnax-blines PPO": [(1_000_000, 16.6)]},
    ("ppo", "MinAtar/SpaceInvaders"): {"gymnax-blines PPO": [(1_000_000, 50.4)]},
}


def timed(fn: Callable[[], int], seconds: float) -> float:
    """Units per second of ``fn`` (it returns how many units one call did) over about ``seconds``."""
    fn()  # warm-up
    units, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        units += fn()
    return units / (time.perf_counter() - start)


def compare(bare: Callable[[], int], lib: Callable[[], int], seconds: float) -> Tuple[float, float]:
    """(bare, library) rates over two alternating rounds each."""
    rates = {"bare": [], "lib": []}
    for _ in range(2):
        rates["bare"].append(timed(bare, seconds / 2))
        rates["lib"].append(timed(lib, seconds / 2))
    return float(np.mean(rates["bare"])), float(np.mean(rates["lib"]))


def bare_network(kind: str, shape, actions: int) -> nn.Module:
    """The published network written inline: MinAtar's (Young & Tian 2019) or the Nature CNN (Mnih et al. 2015)."""
    if kind == "minatar":
        channels = shape[-1]
        convs = nn.Sequential(nn.Conv2d(channels, 16, 3), nn.ReLU(), nn.Flatten())
        features, fc = 16 * (shape[0] - 2) * (shape[1] - 2), 128
    else:
        convs = nn.Sequential(
            nn.Conv2d(shape[0], 32, 8, 4),
            nn.ReLU(),
            nn.Conv2d(32, 64, 4, 2),
            nn.ReLU(),
            nn.Conv2d(64, 64, 3, 1),
            nn.ReLU(),
            nn.Flatten(),
        )
        features, fc = 3136, 512
    return nn.Sequential(convs, nn.Linear(features, fc), nn.ReLU(), nn.Linear(fc, actions))


def bare_input(obs: torch.Tensor, kind: str) -> torch.Tensor:
    """uint8 frames / 255, bool boards as 0/1; MinAtar's boards channels last -> first."""
    x = obs.float() / 255.0 if obs.dtype == torch.uint8 else obs.float()
    return x.permute(0, 3, 1, 2) if kind == "minatar" else x


def load(config: str, **overrides):
    import runpy

    from parallel_rl.config import compile_config

    user = runpy.run_path(config)["main_config"]
    for section, values in overrides.items():
        user[section] = {**user.get(section, {}), **values}
    return compile_config(user)


# ---- (a) and (b): a Pong collector ---------------------------------------------------------------------
def collector_rates(seconds: float) -> dict:
    import gymnasium as gym

    from parallel_rl.collector.cluster import ClusterCollector
    from parallel_rl.envs.env_manager import import_env_modules
    from parallel_rl.storage import SharedStorage

    tmp = tempfile.mkdtemp(prefix="pixels-")
    cfg = load("configs/pong_dqn_parallel.py", env={"collector_env_num": 8})
    storage = SharedStorage(os.path.join(tmp, "shared"))
    collector = ClusterCollector(cfg, storage, seed=0)
    rows = int(cfg.parallel.collector.chunk_size)
    written = {"rows": 0, "bytes": 0, "n": 0}

    def lib_collect() -> int:
        data, stats = collector.collect(rows, eps=0.05)
        return stats.env_steps

    def lib_collect_and_write() -> int:
        data, stats = collector.collect(rows, eps=0.05)
        name = f"c1-{written['n']:07d}"
        collector.send_stepdata(name, data)
        written["n"] += 1
        written["rows"] += len(data["action"])
        written["bytes"] += storage.chunks.size(name)
        storage.chunks.delete(name)
        return stats.env_steps

    import_env_modules(cfg.env.import_names)
    num = int(cfg.env.collector_env_num)
    raw = gym.make_vec(cfg.env.env_id, num_envs=num, vectorization_mode="vector_entry_point", **cfg.env.env_kwargs)
    net = bare_network("nature", raw.single_observation_space.shape, int(raw.single_action_space.n))
    obs, _ = raw.reset(seed=0)
    rng = np.random.default_rng(0)
    size = 4096
    store = {
        "obs": np.zeros((size, *obs.shape[1:]), np.uint8),
        "next_obs": np.zeros((size, *obs.shape[1:]), np.uint8),
        "action": np.zeros(size, np.int64),
        "reward": np.zeros(size, np.float32),
        "done": np.zeros(size, bool),
    }
    state = {"obs": obs, "pos": 0, "reset": np.zeros(num, bool)}

    def bare_step() -> int:
        # what one writes by hand: the CNN's argmax, epsilon-greedy, step, 1-step rows of real transitions
        obs = state["obs"]
        with torch.no_grad():
            action = net(bare_input(torch.from_numpy(obs), "nature")).argmax(-1).numpy()
        action = np.where(rng.random(num) < 0.05, rng.integers(0, 6, num), action)
        next_obs, reward, term, trunc, _ = raw.step(action)
        keep = np.flatnonzero(~state["reset"])
        at = (state["pos"] + np.arange(len(keep))) % size
        store["obs"][at], store["next_obs"][at] = obs[keep], next_obs[keep]
        store["action"][at], store["reward"][at], store["done"][at] = action[keep], reward[keep], term[keep]
        state.update(obs=next_obs, pos=(state["pos"] + len(keep)) % size, reset=term | trunc)
        return len(keep)

    try:
        bare, lib = compare(bare_step, lib_collect, seconds)
        bare_w, lib_w = compare(bare_step, lib_collect_and_write, seconds)
    finally:
        collector.close()
        raw.close()
    return {
        "bare": bare,
        "lib": lib,
        "bare_w": bare_w,
        "lib_w": lib_w,
        "chunk_bytes": written["bytes"] / max(1, written["rows"]),
        "chunk_rows": rows,
    }


# ---- run: the bytes a real cluster run writes ----------------------------------------------------------
RUN_CONFIGS = ("configs/pong_dqn_parallel.py", "configs/pong_ppo_parallel.py")


def run_chunk_bytes(config: str, env_steps: int, overrides=()) -> Tuple[int, int]:
    """(bytes, rows) of every chunk file ``parallel-rl run -c config --collectors 1`` stopped after ``env_steps``
    env steps wrote: its store's ``data/`` watched while it runs (each file's size and rows from its headers:
    ``chunk_layout``). A chunk stays ``chunk_grace_seconds`` (10 s) after the replay let it go (PPO's, once
    trained on), so a look every 0.2 s sees every one."""
    import subprocess

    from parallel_rl.storage import SharedStorage

    seen = {}
    with tempfile.TemporaryDirectory(prefix="pixels-run-") as tmp:
        shared = os.path.join(tmp, "shared")
        cmd = [
            sys.executable,
            "-m",
            "parallel_rl",
            "run",
            "-c",
            config,
            "--collectors",
            "1",
            "--port",
            "0",
            "--shared-dir",
            shared,
            "--set",
            f"parallel.commander.max_env_step={env_steps}",
            "--set",
            f"exp_name={os.path.join(tmp, 'exp')}",
        ]
        for override in overrides:
            cmd += ["--set", override]
        with open(os.path.join(tmp, "run.log"), "w+") as log:
            run = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
            try:
                storage = None
                while True:
                    finished = run.poll() is not None
                    if storage is None and os.path.isdir(os.path.join(shared, "data")):
                        storage = SharedStorage(shared)
                    for name in [] if storage is None else storage.chunks.names():
                        if name not in seen:
                            try:
                                rows, nbytes, _ = storage.chunks.layout(name)
                            except FileNotFoundError:
                                continue  # a fresh run's clean-up, or gone meanwhile
                            seen[name] = (nbytes, rows)
                    if finished:
                        break
                    time.sleep(0.2)
            finally:
                if run.poll() is None:
                    run.kill()
            if run.returncode not in (0, 3) or not seen:  # 3: the budget ended it before the stop value
                log.seek(0)
                raise RuntimeError(f"{' '.join(cmd)} exited {run.returncode}: {log.read()[-2000:]}")
    return sum(b for b, _ in seen.values()), sum(r for _, r in seen.values())


# ---- (c) and (d): DQN learner updates ----------------------------------------------------------------
def learner_rates(kind: str, seconds: float, device: str = "cpu") -> Tuple[float, float]:
    from parallel_rl.data import create_buffer
    from parallel_rl.envs.spaces import ActionSpec
    from parallel_rl.policy import create_policy
    from parallel_rl.worker import BaseLearner

    config = "configs/minatar_breakout_dqn.py" if kind == "minatar" else "configs/pong_dqn.py"
    cfg = load(config)
    shape, actions = tuple(cfg.policy.model.encoder.shape), (3 if kind == "minatar" else 6)
    batch_size, gamma = int(cfg.policy.learn.batch_size), float(cfg.policy.discount_factor)
    n = 5000 if kind == "minatar" else 1500
    rng = np.random.default_rng(0)
    if kind == "minatar":
        frames = rng.random((n, *shape)) < 0.1
        next_frames = rng.random((n, *shape)) < 0.1
    else:
        frames = rng.integers(0, 256, (n, *shape), dtype=np.uint8)
        next_frames = rng.integers(0, 256, (n, *shape), dtype=np.uint8)
    data = {
        "obs": frames,
        "next_obs": next_frames,
        "action": rng.integers(0, actions, n),
        "reward": rng.random(n, dtype=np.float32),
        "done": rng.random(n) < 0.01,
        "discount": np.full(n, gamma ** int(cfg.policy.nstep), np.float32),
        "collect_iter": np.zeros(n, np.int64),
    }
    lr, target_every = float(cfg.policy.learn.learning_rate), int(cfg.policy.learn.target_update_freq)

    # bare: what one writes by hand (CleanRL's DQN update)
    dev = torch.device(device)
    model, target = bare_network(kind, shape, actions).to(dev), bare_network(kind, shape, actions).to(dev)
    target.load_state_dict(model.state_dict())
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    tensors = {k: torch.from_numpy(v).to(dev) for k, v in data.items()}
    steps = {"n": 0}

    def bare_update() -> int:
        idx = torch.from_numpy(rng.integers(0, n, batch_size)).to(dev)
        q = model(bare_input(tensors["obs"][idx], kind)).gather(1, tensors["action"][idx].unsqueeze(1)).squeeze(1)
        with torch.no_grad():
            next_q = target(bare_input(tensors["next_obs"][idx], kind)).max(1).values
            td_target = tensors["reward"][idx] + tensors["discount"][idx] * (~tensors["done"][idx]).float() * next_q
        loss = F.smooth_l1_loss(q, td_target)
        opt.zero_grad()
        loss.backward()
        opt.step()
        loss.item()  # a learner reads its loss: on a GPU this waits for the update, as the library's does
        steps["n"] += 1
        if steps["n"] % target_every == 0:
            target.load_state_dict(model.state_dict())
        return 1

    policy = create_policy(cfg.policy, int(np.prod(shape)), ActionSpec.discrete(actions), seed=0, device=device)
    learner = BaseLearner(cfg.policy.learn.learner, policy.learn_mode)
    buffer = create_buffer({"type": "naive", "replay_buffer_size": n})
    buffer.push(data)

    def lib_update() -> int:
        learner.train(buffer.sample(batch_size, learner.train_iter))
        return 1

    return compare(bare_update, lib_update, seconds)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--curve", action="store_true", help="learning curves (benchmarks/curves.py's arguments)")
    parser.add_argument("--seconds", type=float, default=10.0, help="per side of each pair")
    parser.add_argument(
        "--only",
        nargs="+",
        choices=["chunk", "collector", "minatar", "nature", "run"],
        default=["collector", "minatar", "nature", "run"],
        help="chunk is measured with collector",
    )
    parser.add_argument("--run-env-steps", type=int, default=4000, help="env steps of each run of the run pair")
    parser.add_argument("--device", default="cpu", help="the learner pairs' device (cuda: both sides on the GPU)")
    args, rest = parser.parse_known_args()
    if args.curve:
        from curves import main as curves_main

        return curves_main(REFERENCES, "Pixel learning curves (MinAtar, Atari)", rest)
    torch.set_num_threads(1)
    from parallel_rl.envs.env_manager import import_env_modules

    import_env_modules(["ale_py", "minatar"])
    if {"chunk", "collector"} & set(args.only):
        r = collector_rates(args.seconds)
        print(
            f"chunk bytes per transition (Pong, stack 4, {r['chunk_rows']}-row chunks): {r['chunk_bytes']:,.0f} "
            f"(target <= 8,500; one frame 7,056)"
        )
        print(
            f"collector env steps/s, Pong, Nature CNN acting: library {r['lib']:.0f} vs bare {r['bare']:.0f} "
            f"-> {r['lib'] / r['bare']:.2f} (target >= 0.85); writing its chunks: {r['lib_w']:.0f} vs "
            f"{r['bare_w']:.0f} -> {r['lib_w'] / r['bare_w']:.2f}"
        )
    if "run" in args.only:
        for config in RUN_CONFIGS:
            for label, overrides in (("as shipped", ()), ("64-row chunks", ("parallel.collector.chunk_size=64",))):
                nbytes, rows = run_chunk_bytes(config, args.run_env_steps, overrides)
                print(
                    f"parallel-rl run {config}, 1 collector, {args.run_env_steps:,} env steps, {label}: "
                    f"{nbytes / max(rows, 1):,.0f} bytes per transition ({nbytes:,} B over {rows:,} transitions; "
                    f"target <= 8,500; one frame 7,056)",
                    flush=True,
                )
    for kind in ("minatar", "nature"):
        if kind in args.only:
            bare, lib = learner_rates(kind, args.seconds, args.device)
            print(
                f"DQN learner updates/s, {kind} network, batch 32, {args.device}: library {lib:.1f} vs bare "
                f"{bare:.1f} -> {lib / bare:.2f} (target >= 0.9)"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
