"""Throughput of the library's hot loops next to bare loops doing the same work, same run.

    .venv/bin/python benchmarks/hot_loops.py [--seconds 3]

- collector: SampleSerialCollector.collect(64) (8 CartPole envs, epsilon-greedy, n-step
  returns, per-env episode stats) vs a bare hand-written loop: the same MLP's argmax,
  epsilon-greedy, vector env step, 1-step transition rows written to numpy arrays.
- learner: buffer.sample + BaseLearner.train (+ priority update) vs a bare loop:
  uniform numpy sampling + the same double-DQN update (grad clipping included)
  written inline with torch.optim.Adam.
- SAC / TD3 learners (HalfCheetah's shapes: 17 observations, 6 actions, 256x256 networks, batch 256,
  uniform replay): buffer.sample + BaseLearner.train vs a bare loop of the same update written inline
  with torch.optim.Adam on the same networks (``--only sac td3`` runs just these). Target >= 0.9.
- ppo_lstm: recurrent PPO's learner on sequences (configs/cartpole_novel_ppo_lstm.py's model and update:
  an actor LSTM and a critic LSTM of 64, ReLU heads of 64, one 256-row segment of 8 masked-CartPole lanes cut into
  sequences of 32, 20 epochs) through BaseLearner.train vs a bare torch loop of the same update: GAE, then per
  epoch the two LSTMs unrolled over the sequences from their stored states (zeroed where an episode starts),
  the clipped loss, Adam with grad clipping (``--only ppo_lstm``). Target >= 0.85.
Target: library >= 85% of bare.
"""

from __future__ import annotations

import argparse
import time

import gymnasium as gym
import numpy as np
import torch
import torch.nn.functional as F

from parallel_rl.config import compile_config
from parallel_rl.data import create_buffer
from parallel_rl.envs import EnvManager
from parallel_rl.policy import DQNPolicy, QNetwork
from parallel_rl.worker import BaseLearner, SampleSerialCollector


def timed(fn, seconds: float, warmup: int = 20) -> float:
    """Calls per second of fn over about ``seconds`` (after ``warmup`` calls)."""
    for _ in range(warmup):
        fn()
    n, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        fn()
        n += 1
    return n / (time.perf_counter() - start)


def collector_rates(cfg, seconds: float, nstep: int) -> tuple[float, float]:
    env = EnvManager("CartPole-v1", 8, seed=0)
    policy = DQNPolicy(cfg.policy, env.obs_dim, env.action_num, seed=0)
    model, eps = policy.model, 0.1
    raw = gym.make_vec("CartPole-v1", num_envs=8, vectorization_mode="vector_entry_point")
    obs, _ = raw.reset(seed=0)
    rng = np.random.default_rng(0)
    size = 1 << 16
    store = {
        "obs": np.zeros((size, 4), np.float32),
        "next_obs": np.zeros((size, 4), np.float32),
        "action": np.zeros(size, np.int64),
        "reward": np.zeros(size, np.float32),
        "done": np.zeros(size, bool),
    }
    state = {"obs": obs, "pos": 0, "reset": np.zeros(8, bool)}

    def bare_step():
        # what one writes by hand: epsilon-greedy, step, write 1-step rows of real transitions
        obs = state["obs"]
        with torch.no_grad():
            action = model(torch.from_numpy(obs)).argmax(dim=-1).numpy()
        explore = rng.random(8) < eps
        action = np.where(explore, rng.integers(0, 2, 8), action)
        next_obs, reward, term, trunc, _ = raw.step(action)
        keep = np.flatnonzero(~state["reset"])
        pos = state["pos"]
        rows = (pos + np.arange(len(keep))) % size
        store["obs"][rows], store["next_obs"][rows] = obs[keep], next_obs[keep]
        store["action"][rows], store["reward"][rows], store["done"][rows] = action[keep], reward[keep], term[keep]
        state.update(obs=next_obs, pos=(pos + len(keep)) % size, reset=term | trunc)

    bare = timed(bare_step, seconds) * 8
    collector = SampleSerialCollector(None, env, policy.collect_mode, nstep=nstep)
    # keep_extra: every transition made is returned (by this call or the next), as the bare loop keeps them all
    lib = timed(lambda: collector.collect(64, policy_kwargs={"eps": eps}, keep_extra=True), seconds) * 64
    env.close()
    raw.close()
    return bare, lib


def learner_rates(cfg, seconds: float, buffer_type: str) -> tuple[float, float]:
    rng = np.random.default_rng(0)
    n, batch_size = 20000, cfg.policy.learn.batch_size
    data = {
        "obs": rng.random((n, 4), dtype=np.float32),
        "action": rng.integers(0, 2, n),
        "reward": rng.random(n, dtype=np.float32),
        "next_obs": rng.random((n, 4), dtype=np.float32),
        "done": rng.random(n) < 0.05,
        "discount": np.full(n, 0.97, np.float32),
        "collect_iter": np.zeros(n, np.int64),
    }
    # bare: what one writes by hand
    hidden, dueling = cfg.policy.model.hidden_size_list, cfg.policy.model.dueling
    model, target = QNetwork(4, 2, hidden, dueling), QNetwork(4, 2, hidden, dueling)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    tensors = {k: torch.from_numpy(v) for k, v in data.items()}

    def bare_update():
        idx = torch.from_numpy(rng.integers(0, n, batch_size))
        obs, nxt = tensors["obs"][idx], tensors["next_obs"][idx]
        q = model(obs).gather(1, tensors["action"][idx].unsqueeze(1)).squeeze(1)
        with torch.no_grad():
            next_a = model(nxt).argmax(1, keepdim=True)
            td_target = tensors["reward"][idx] + tensors["discount"][idx] * (~tensors["done"][idx]).float() * target(
                nxt
            ).gather(1, next_a).squeeze(1)
        loss = F.smooth_l1_loss(q, td_target)
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.policy.learn.max_grad_norm)
        opt.step()

    bare = timed(bare_update, seconds)
    policy = DQNPolicy(cfg.policy, 4, 2, seed=0)
    learner = BaseLearner(cfg.policy.learn.learner, policy.learn_mode)
    buffer = create_buffer({"type": buffer_type, "replay_buffer_size": n})
    buffer.push(data)

    def lib_update():
        learner.train(buffer.sample(batch_size, learner.train_iter))
        if learner.priority_info is not None:
            buffer.update(learner.priority_info)

    lib = timed(lib_update, seconds)
    return bare, lib


def actor_critic_rates(kind: str, seconds: float, device: str = "cpu", cuda_graph: bool = True) -> tuple[float, float]:
    """SAC or TD3 updates/s: the library (naive buffer + BaseLearner + policy) vs the same update by hand."""
    from parallel_rl.envs.spaces import ActionSpec
    from parallel_rl.policy import create_policy

    rng = np.random.default_rng(0)
    n, obs_dim, act_dim, batch_size, gamma, tau = 100_000, 17, 6, 256, 0.99, 0.005
    data = {
        "obs": rng.normal(size=(n, obs_dim)).astype(np.float32),
        "action": rng.uniform(-1, 1, (n, act_dim)).astype(np.float32),
        "reward": rng.normal(size=n).astype(np.float32),
        "next_obs": rng.normal(size=(n, obs_dim)).astype(np.float32),
        "done": np.zeros(n, bool),
        "discount": np.full(n, gamma, np.float32),
        "collect_iter": np.zeros(n, np.int64),
    }
    cfg = compile_config(
        {
            "env": {"env_id": "Pendulum-v1"},
            "policy": {
                "type": kind,
                "learn": {
                    "batch_size": batch_size,
                    "cuda_graph": cuda_graph,
                    "learner": {"hook": {"log_show_after_iter": 0, "save_ckpt_after_run": False}},
                },
            },
        }
    )
    spec = ActionSpec(
        "box", shape=(act_dim,), low=np.full(act_dim, -1.0, np.float32), high=np.full(act_dim, 1.0, np.float32)
    )
    tensors = {k: torch.from_numpy(v).to(device) for k, v in data.items()}

    def net(inp, out):
        return torch.nn.Sequential(
            torch.nn.Linear(inp, 256),
            torch.nn.ReLU(),
            torch.nn.Linear(256, 256),
            torch.nn.ReLU(),
            torch.nn.Linear(256, out),
        ).to(device)

    actor = net(obs_dim, 2 * act_dim if kind == "sac" else act_dim)
    actor_target = net(obs_dim, act_dim)
    q1, q2, tq1, tq2 = (net(obs_dim + act_dim, 1) for _ in range(4))
    log_alpha = torch.zeros((), requires_grad=True, device=device)
    opt_q = torch.optim.Adam(list(q1.parameters()) + list(q2.parameters()), lr=3e-4)
    opt_pi = torch.optim.Adam(actor.parameters(), lr=3e-4)
    opt_alpha = torch.optim.Adam([log_alpha], lr=3e-4)
    step = [0]

    def sample_pi(obs):
        mean, log_std = actor(obs).chunk(2, -1)
        std = log_std.clamp(-20, 2).exp()
        u = mean + std * torch.randn_like(mean)
        logp = torch.distributions.Normal(mean, std).log_prob(u).sum(-1) - (
            2 * (np.log(2) - u - F.softplus(-2 * u))
        ).sum(-1)
        return torch.tanh(u), logp

    def bare_update():
        idx = torch.from_numpy(rng.integers(0, n, batch_size)).to(device)
        obs, act, nxt = tensors["obs"][idx], tensors["action"][idx], tensors["next_obs"][idx]
        rew, disc = tensors["reward"][idx], tensors["discount"][idx]
        alpha = log_alpha.detach().exp()
        with torch.no_grad():
            if kind == "sac":
                a2, logp2 = sample_pi(nxt)
            else:
                a2 = (torch.tanh(actor_target(nxt)) + (torch.randn_like(act) * 0.2).clamp(-0.5, 0.5)).clamp(-1, 1)
            x2 = torch.cat([nxt, a2], -1)
            target_q = torch.min(tq1(x2), tq2(x2)).squeeze(-1)
            y = rew + disc * (target_q - alpha * logp2 if kind == "sac" else target_q)
        x = torch.cat([obs, act], -1)
        loss_q = F.mse_loss(q1(x).squeeze(-1), y) + F.mse_loss(q2(x).squeeze(-1), y)
        opt_q.zero_grad()
        loss_q.backward()
        opt_q.step()
        step[0] += 1
        if kind == "sac":
            a, logp = sample_pi(obs)
            xa = torch.cat([obs, a], -1)
            loss_pi = (alpha * logp - torch.min(q1(xa), q2(xa)).squeeze(-1)).mean()
        elif step[0] % 2 == 0:
            loss_pi = -q1(torch.cat([obs, torch.tanh(actor(obs))], -1)).mean()
        else:
            return
        opt_pi.zero_grad()
        loss_pi.backward()
        opt_pi.step()
        if kind == "sac":
            loss_alpha = -(log_alpha * (logp.detach() - act_dim)).mean()
            opt_alpha.zero_grad()
            loss_alpha.backward()
            opt_alpha.step()
        with torch.no_grad():
            for t, o in ((tq1, q1), (tq2, q2)) + (((actor_target, actor),) if kind == "td3" else ()):
                torch._foreach_lerp_(list(t.parameters()), list(o.parameters()), tau)

    bare = timed(bare_update, seconds)
    policy = create_policy(cfg.policy, obs_dim, spec, seed=0, device=device)
    learner = BaseLearner(cfg.policy.learn.learner, policy.learn_mode)
    buffer = create_buffer({"type": "naive", "replay_buffer_size": n})
    buffer.push(data)
    lib = timed(lambda: learner.train(buffer.sample(batch_size, learner.train_iter)), seconds)
    if device != "cpu":
        torch.cuda.synchronize()
    return bare, lib


def ppo_lstm_rates(seconds: float) -> tuple[float, float]:
    """Recurrent PPO updates/s on a collected segment: the library's learner vs the same update by hand."""
    import runpy

    from parallel_rl.policy import create_policy

    def rate(fn) -> float:  # calls/s; a call is a whole segment's epochs, so a one-call warm-up
        return timed(fn, seconds, warmup=1)

    user = runpy.run_path("configs/cartpole_novel_ppo_lstm.py")["main_config"]
    user["policy"]["learn"]["learner"] = {"hook": {"log_show_after_iter": 0, "save_ckpt_after_run": False}}
    cfg = compile_config(user)
    learn, gamma = cfg.policy.learn, cfg.policy.discount_factor
    env = EnvManager.from_cfg(cfg.env, 8, seed=0)
    policy = create_policy(cfg.policy, env.obs_dim, env.action_spec, seed=0)
    segment = SampleSerialCollector(None, env, policy.collect_mode, nstep=1).collect(n_sample=256)
    learner = BaseLearner(cfg.policy.learn.learner, policy.learn_mode)
    epochs = int(learn.epoch_per_collect)
    lib = rate(lambda: learner.train(segment)) * epochs

    # by hand: the segment as (T, lanes) grids (8 lanes x 32 steps), sequences = lanes
    model = cfg.policy.model
    hidden, T = int(model.recurrent.hidden_size), 32
    act = {"relu": torch.nn.ReLU, "tanh": torch.nn.Tanh}[model.activation]
    order = np.lexsort((np.arange(len(segment["env_id"])), segment["env_id"]))
    grid = {
        k: torch.from_numpy(v[order][: 8 * T].reshape(8, T, *v.shape[1:]).swapaxes(0, 1).copy())
        for k, v in segment.items()
        if k in ("obs", "action", "reward", "done", "end", "logp", "value", "hidden_h", "hidden_c", "next_obs")
    }
    lstms = torch.nn.ModuleList(torch.nn.LSTM(4, hidden) for _ in range(2))

    def head(out):
        sizes = [hidden] + list(model.hidden_size_list)
        layers = [m for a, b in zip(sizes[:-1], sizes[1:]) for m in (torch.nn.Linear(a, b), act())]
        return torch.nn.Sequential(*layers, torch.nn.Linear(sizes[-1], out))

    heads = torch.nn.ModuleList(head(out) for out in (2, 1))
    params = list(lstms.parameters()) + list(heads.parameters())
    opt = torch.optim.Adam(params, lr=1e-3, eps=learn.adam_eps)
    starts = torch.zeros(T, 8, dtype=torch.bool)
    starts[1:] = grid["end"][:-1]
    cuts = [0] + (torch.nonzero(starts[1:].any(1)).flatten() + 1).tolist() + [T]

    def unroll(i, x, h, c):
        outs = []
        for a, b in zip(cuts[:-1], cuts[1:]):
            keep = (~starts[a]).float().unsqueeze(-1)
            out, (h, c) = lstms[i](x[a:b], ((h * keep).unsqueeze(0), (c * keep).unsqueeze(0)))
            h, c = h[0], c[0]
            outs.append(out)
        return torch.cat(outs)

    def bare_update():
        with torch.no_grad():  # GAE over the grid (the value after the last step: the critic's, as the library)
            value = grid["value"].double()
            adv, running = torch.zeros_like(value), torch.zeros(8, dtype=torch.float64)
            next_value = torch.cat([value[1:], value[-1:]])
            for t in range(T - 1, -1, -1):
                cont = (~grid["end"][t]).double()
                delta = grid["reward"][t] + gamma * (1 - grid["done"][t].double()) * next_value[t] - value[t]
                running = delta + gamma * learn.gae_lambda * cont * running
                adv[t] = running
            target = (adv + value).float()
            adv = adv.float()
        h0, c0 = grid["hidden_h"][0], grid["hidden_c"][0]
        for _ in range(epochs):
            a_feat = unroll(0, grid["obs"], h0[:, :hidden], c0[:, :hidden])
            v_feat = unroll(1, grid["obs"], h0[:, hidden:], c0[:, hidden:])
            dist = torch.distributions.Categorical(logits=heads[0](a_feat), validate_args=False)
            logp = dist.log_prob(grid["action"])
            ratio = torch.exp(logp - grid["logp"])
            norm = (adv - adv.mean()) / (adv.std() + 1e-8)
            pg = -torch.min(ratio * norm, ratio.clamp(0.8, 1.2) * norm).mean()
            v_loss = 0.5 * (heads[1](v_feat).squeeze(-1) - target).pow(2).mean()
            loss = pg + 0.5 * v_loss - 0.0 * dist.entropy().mean()
            opt.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(params, 0.5)
            opt.step()

    bare = rate(bare_update) * epochs
    env.close()
    return bare, lib


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument(
        "--only",
        nargs="*",
        choices=("collector", "learner", "sac", "td3", "ppo_lstm"),
        default=("collector", "learner", "sac", "td3", "ppo_lstm"),
    )
    parser.add_argument("--device", default="cpu", help="sac/td3: where both loops train (cuda on a GPU machine)")
    parser.add_argument(
        "--no-cuda-graph",
        dest="cuda_graph",
        action="store_false",
        help="sac/td3 on cuda: the library's update without its CUDA graph (policy.learn.cuda_graph)",
    )
    parser.add_argument(
        "--threads", type=int, default=1, help="torch CPU threads (1: the learner's default, system.torch_num_threads)"
    )
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    for kind in ("sac", "td3"):
        if kind in args.only:
            bare, lib = actor_critic_rates(kind, args.seconds, args.device, args.cuda_graph)
            graph = ", CUDA graph" if args.device.startswith("cuda") and args.cuda_graph else ""
            print(
                f"{kind} learner updates/s (256x256, batch 256, {args.device}{graph}, {args.threads} threads): library {lib:7.1f}  bare {bare:7.1f}  "
                f"ratio {lib / bare:.2f}"
            )
    cfg = compile_config(
        {"policy": {"learn": {"learner": {"hook": {"log_show_after_iter": 0, "save_ckpt_after_run": False}}}}}
    )
    for nstep in (1, 3) if "collector" in args.only else ():
        bare, lib = collector_rates(cfg, args.seconds, nstep)
        print(f"collector env steps/s (nstep={nstep}): library {lib:7.0f}  bare {bare:7.0f}  ratio {lib / bare:.2f}")
    for kind in ("naive", "advanced") if "learner" in args.only else ():
        bare, lib = learner_rates(cfg, args.seconds, kind)
        print(f"learner updates/s ({kind:8s}): library {lib:7.0f}  bare {bare:7.0f}  ratio {lib / bare:.2f}")
    if "ppo_lstm" in args.only:
        bare, lib = ppo_lstm_rates(args.seconds)
        print(
            f"ppo_lstm learner updates/s (2 LSTMs of 64, 8 sequences of 32): library {lib:7.1f}  bare {bare:7.1f}  "
            f"ratio {lib / bare:.2f}"
        )


if __name__ == "__main__":
    main()
