"""Learning curves of any config: eval return against env steps and wall seconds (shared by the curve benchmarks:
``benchmarks/mujoco.py``, ``benchmarks/pixels.py --curve``).

Each seed is a fresh ``parallel-rl serial`` (configs without a ``parallel`` section) or ``parallel-rl run``
process, as a user runs it (torch's import counted in the wall time). The curve comes from what the product
itself records: the serial pipeline's progress line at each evaluation, the coordinator's evaluation history
(its snapshot on the shared store: env steps, seconds since it started, eval return). Writes
``OUT/<config>.csv`` (seed, env_steps, wall_s, train_iter, eval_return, and for cluster runs train_return: the
mean return of the newest 100 training episodes at that evaluation, the metric of Young & Tian's DQN figures and
SB3's ep_rew_mean), ``OUT/<config>.png`` (return vs env
steps and vs wall seconds, one line per seed, the median, and the published reference points) and prints,
per seed, the return of the last evaluation at or before each reference step count and the wall time.
The caller passes its references: (policy type, env id prefix) -> source -> [(env steps, eval return)].
"""

from __future__ import annotations

import argparse
import csv
import glob
import json
import os
import re
import statistics
import subprocess
import sys
import time
from typing import Dict, List, Optional, Sequence

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

SERIAL_LINE = re.compile(r"^\[serial\s+([\d.]+)s\] eval_return=(-?[\d.]+)/\S+.* env_steps=(\d+) updates=(\d+)")


def load_cfg(path: str, settings: Sequence[str] = ()):
    """The config file as written (``raw``) and compiled with the runs' ``--set`` overrides (the title and the
    references follow what ran: ``--set env.env_id=...`` used to be titled with the file's env)."""
    from parallel_rl.config import apply_overrides, compile_config, load_config_file

    raw = load_config_file(path)
    return raw, compile_config(apply_overrides(raw, settings))


def run_seed(
    config: str,
    cluster: bool,
    seed: int,
    max_env_step: int,
    collectors: int,
    out: str,
    name: str,
    settings: Sequence[str] = (),
) -> List[dict]:
    exp = os.path.abspath(os.path.join(out, f"{name}_s{seed}"))
    budget = "parallel.commander.max_env_step" if cluster else "serial.max_env_step"
    cmd = [
        sys.executable,
        "-m",
        "parallel_rl",
        "run" if cluster else "serial",
        "-c",
        config,
        "--set",
        f"seed={seed}",
        "--set",
        f"exp_name={exp}",
        "--set",
        f"{budget}={max_env_step}",
    ]
    if cluster:
        cmd += ["--collectors", str(collectors)]
    cmd += [a for setting in settings for a in ("--set", setting)]
    log_path = f"{exp}.log"
    print(f"seed {seed}: {' '.join(cmd[1:])}  (log: {log_path})", flush=True)
    start = time.perf_counter()
    with open(log_path, "w") as log:
        proc = subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT)
    wall = time.perf_counter() - start
    rows = cluster_curve(exp) if cluster else serial_curve(log_path)
    last = rows[-1] if rows else {}
    print(
        f"seed {seed}: exit {proc.returncode}, {len(rows)} evaluations, last eval_return="
        f"{last.get('eval_return', float('nan')):.1f} at env_steps={last.get('env_steps', 0)}, wall {wall:.0f}s",
        flush=True,
    )
    return [{"seed": seed, **r} for r in rows] + [
        {"seed": seed, "env_steps": -1, "wall_s": round(wall, 1), "train_iter": -1, "eval_return": float("nan")}
    ]


def serial_curve(log_path: str) -> List[dict]:
    rows = []
    with open(log_path) as log:
        for line in log:
            m = SERIAL_LINE.match(line.strip())
            if m:
                rows.append(
                    {
                        "env_steps": int(m.group(3)),
                        "wall_s": float(m.group(1)),
                        "train_iter": int(m.group(4)),
                        "eval_return": float(m.group(2)),
                    }
                )
    return rows


def cluster_curve(exp: str) -> List[dict]:
    """The coordinator's evaluation history from its newest snapshot on the shared store."""
    snapshots = sorted(glob.glob(os.path.join(exp, "shared", "coordinator", "state_*.json")))
    if not snapshots:
        return []
    with open(snapshots[-1]) as f:
        history = json.load(f).get("eval_history", [])
    nan = float("nan")
    return [
        {
            "env_steps": int(h["env_steps"]),
            "wall_s": float(h["t"]),
            "train_iter": int(h["train_iter"]),
            "eval_return": float(h["eval_return"]),
            "train_return": nan if h.get("train_return") is None else float(h["train_return"]),
        }
        for h in history
    ]


def at_step(rows: List[dict], step: int, key: str = "eval_return") -> Optional[float]:
    """The return (``key``) of the last evaluation at or before ``step`` env steps."""
    before = [r for r in rows if 0 <= r["env_steps"] <= step]
    return before[-1].get(key, float("nan")) if before else None


def references_for(references: dict, cfg) -> Dict[str, list]:
    for (policy, env), refs in references.items():
        if cfg.policy.type == policy and cfg.env.env_id.startswith(env):
            return refs
    return {}


def plot(rows: List[dict], refs: Dict[str, list], title: str, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5))
    seeds = sorted({r["seed"] for r in rows})
    for seed in seeds:
        curve = [r for r in rows if r["seed"] == seed and r["env_steps"] >= 0]
        axes[0].plot(
            [r["env_steps"] for r in curve], [r["eval_return"] for r in curve], alpha=0.6, label=f"seed {seed}"
        )
        axes[1].plot(
            [r["wall_s"] / 60 for r in curve], [r["eval_return"] for r in curve], alpha=0.6, label=f"seed {seed}"
        )
    markers = iter("o^sDv")
    for source, points in refs.items():
        axes[0].scatter(
            [p[0] for p in points], [p[1] for p in points], marker=next(markers), s=60, zorder=3, label=source
        )
    axes[0].set_xlabel("env steps")
    axes[1].set_xlabel("wall minutes (this box)")
    for ax in axes:
        ax.set_ylabel("eval return")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    print(f"wrote {path}")


def main(references: dict, description: str, argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("-c", "--config", required=True)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    parser.add_argument("--max-env-step", type=int, default=100_000)
    parser.add_argument("--collectors", type=int, default=1, help="cluster configs: collector processes")
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a config override for every seed's run (as parallel-rl's --set)",
    )
    parser.add_argument("--out", default="benchmarks/results")
    parser.add_argument("--target", type=float, default=None, help="print whether the median reaches it")
    parser.add_argument("--plot-only", action="store_true", help="redraw the PNG and table from OUT/<config>.csv")
    args = parser.parse_args(argv)
    raw, cfg = load_cfg(args.config, args.set)
    cluster = "parallel" in raw
    name = os.path.splitext(os.path.basename(args.config))[0]
    os.makedirs(args.out, exist_ok=True)
    csv_path = os.path.join(args.out, f"{name}.csv")
    fields = ["seed", "env_steps", "wall_s", "train_iter", "eval_return", "train_return"]
    if args.plot_only:
        with open(csv_path) as f:  # older CSVs have no train_return
            rows = [
                {
                    k: (float(v or "nan") if k in ("wall_s", "eval_return", "train_return") else int(v))
                    for k, v in r.items()
                }
                for r in csv.DictReader(f)
            ]
    else:
        rows = []
        for seed in args.seeds:
            rows += run_seed(args.config, cluster, seed, args.max_env_step, args.collectors, args.out, name, args.set)
            with open(csv_path, "w", newline="") as f:  # after every seed: a stopped benchmark keeps what it had
                writer = csv.DictWriter(f, fieldnames=fields, restval=float("nan"))
                writer.writeheader()
                writer.writerows(rows)
    refs = references_for(references, cfg)
    steps = sorted({p[0] for points in refs.values() for p in points if p[0] <= args.max_env_step}) or [
        args.max_env_step
    ]
    print(f"\n{name} ({'cluster' if cluster else 'serial'}, {cfg.policy.type} on {cfg.env.env_id}):")
    print("seed | " + " | ".join(f"return at {s:,}" for s in steps) + " | best | train return at the end | wall s")
    finals, train_finals = [], []
    for seed in sorted({r["seed"] for r in rows}):
        curve = [r for r in rows if r["seed"] == seed and r["env_steps"] >= 0]
        walls = [r["wall_s"] for r in rows if r["seed"] == seed and r["env_steps"] < 0]
        values = [at_step(curve, s) for s in steps]
        finals.append(values[-1])
        train = at_step(curve, steps[-1], "train_return")
        train_finals.append(train)
        best = max((r["eval_return"] for r in curve), default=float("nan"))
        print(
            f"{seed} | "
            + " | ".join("n/a" if v is None else f"{v:,.0f}" for v in values)
            + f" | {best:,.0f} | {'n/a' if train is None else f'{train:,.1f}'} | {walls[0] if walls else float('nan'):.0f}"
        )
    got = [v for v in finals if v is not None]
    if got:
        median = statistics.median(got)
        print(
            f"median return at {steps[-1]:,} env steps over {len(got)} seed(s): {median:,.0f}"
            + "".join(f"; {src}: {dict(points).get(steps[-1], 'n/a')}" for src, points in refs.items())
        )
        if args.target is not None:
            print(f"target {args.target:,.0f}: {'met' if median >= args.target else 'NOT met'}")
    trained = [v for v in train_finals if v is not None and v == v]
    if trained:
        print(
            f"median training-episode return (the newest 100 episodes) at the last evaluation: "
            f"{statistics.median(trained):,.1f}"
        )
    shown = {src: [p for p in points if p[0] <= args.max_env_step] for src, points in refs.items()}
    plot(
        rows,
        {src: points for src, points in shown.items() if points},
        f"{cfg.policy.type.upper()} {cfg.env.env_id} ({'cluster' if cluster else 'serial'})",
        os.path.join(args.out, f"{name}.png"),
    )
    return 0
