"""Does an Optuna search find a setting that solves faster than the shipped config? (issue 44's Measure)

    .venv/bin/python benchmarks/tune.py [--config configs/cartpole_ppo.py] [--trials 20] [--trial-seeds 0-2]
        [--seeds 100-104] [--out DIR] [--parallel 1] [--pool LEARNERS,COLLECTORS] [--set run.stop_value=475]

1. `parallel-rl tune -c CONFIG --trials N --space SPACE --objective solve-steps --seeds 0-2`: TPE over the space
   below, each trial one training per seed, its value the median of the env steps they took to reach the stop value.
2. The best trial's config (`best_config.py`, written by tune) and the shipped config, each trained on the same
   fresh seeds (`parallel-rl sweep --seeds`): the best of N single-seed trials is partly luck (the seed it drew), so
   the comparison is made again on seeds the search never saw.
With ``--pool L,C`` (a cluster config, e.g. ``configs/cartpole_ppo_parallel.py``) a service (`parallel-rl serve`
with L learner and C collector slots) is started first and every training above is a run on its pool (tune's and
sweep's ``--service``); ``--parallel`` trainings are submitted at once and the pool decides when each runs.
Prints the study's table, then per config the env steps to solve on each fresh seed, their medians and the ratio
best / shipped (below 1: the search found a faster setting). Env steps to solve are those of the first evaluation at
the stop value (a cluster run's: counted when the evaluated policy was announced), so they do not depend on the
machine's load.
"""

from __future__ import annotations

import argparse
import csv
import os
import statistics
import subprocess
import sys
import tempfile
import textwrap
from contextlib import nullcontext
from pathlib import Path

from parallel_rl.after.plot import run_history
from parallel_rl.config import load_cluster_config, load_config

ROOT = Path(__file__).resolve().parent.parent

# CartPole PPO's knobs (RL Zoo's PPO search space, narrowed to what the config exposes)
SPACE = textwrap.dedent("""
    def space(trial):
        return {
            "policy.learn.learning_rate": trial.suggest_float("learning_rate", 1e-4, 3e-3, log=True),
            "policy.learn.epoch_per_collect": trial.suggest_int("epoch_per_collect", 2, 10),
            "policy.learn.batch_size": trial.suggest_categorical("batch_size", [32, 64, 128, 256]),
            "policy.collect.n_sample": trial.suggest_categorical("n_sample", [256, 512, 1024]),
            "policy.learn.gae_lambda": trial.suggest_categorical("gae_lambda", [0.9, 0.95, 0.98]),
            "policy.discount_factor": trial.suggest_categorical("discount_factor", [0.98, 0.99, 0.995]),
        }
""")


def cli(*args: str) -> subprocess.CompletedProcess:
    proc = subprocess.run([sys.executable, "-m", "parallel_rl", *args], capture_output=True, text=True)
    print(proc.stdout, end="", flush=True)
    if proc.returncode not in (0, 1):  # sweep: 1 when a trial failed (reported in its table)
        sys.exit(f"parallel-rl {args[0]} exited {proc.returncode}: {proc.stderr.strip()[-2000:]}")
    return proc


def steps_to_solve(config: str, seeds: str, out: str, parallel: int, sets: list, stop_value: float) -> list:
    """Env steps to the stop value on each seed: its first evaluation at the stop value, as tune's solve-steps
    objective counts them (None where the budget ran out first)."""
    cli("sweep", "-c", config, "--seeds", seeds, "--out", out, "--parallel", str(parallel), *sets)
    with open(os.path.join(out, "results.csv"), newline="") as f:
        rows = list(csv.DictReader(f))
    steps = []
    for row in rows:
        if row["exit"] != "0":
            steps.append(None)
            continue
        solved = [p["env_steps"] for p in run_history(row["dir"]) if p["return"] >= stop_value]
        steps.append(int(solved[0]) if solved else None)
    return steps


def summary(values: list) -> tuple:
    """(median, mean) env steps to solve; NaN where a seed did not solve."""
    if any(v is None for v in values):
        return float("nan"), float("nan")
    return statistics.median(values), statistics.mean(values)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default="configs/cartpole_ppo.py")
    parser.add_argument("--trials", type=int, default=20)
    parser.add_argument("--seeds", default="100-104", help="fresh seeds for the comparison (sweep's --seeds)")
    parser.add_argument(
        "--trial-seeds",
        default="0-2",
        help="the seeds each trial trains (tune's --seeds; its value the median); one seed: the search picks luck",
    )
    parser.add_argument("--out", default=None, help="where everything goes (default: a new temporary directory)")
    parser.add_argument("--parallel", type=int, default=1, help="trainings at once (tune and sweep --parallel)")
    parser.add_argument(
        "--pool",
        default=None,
        metavar="LEARNERS,COLLECTORS",
        help="train every run on a service's pool of that many learner and collector slots (a cluster config)",
    )
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="passed to tune and to the shipped config's sweep (best_config.py holds them), e.g. run.stop_value=475",
    )
    args = parser.parse_args()
    out = args.out or tempfile.mkdtemp(prefix="prl-tune-")
    os.makedirs(out, exist_ok=True)
    space = os.path.join(out, "space.py")
    Path(space).write_text(SPACE)
    config = str(ROOT / args.config)
    study = Path(config).stem
    sets = [a for s in args.set for a in ("--set", s)]
    stop_value = (load_cluster_config if args.pool else load_config)(config, args.set).run.stop_value
    tune_out = os.path.join(out, "tune")
    if args.pool:
        from pool import service  # benchmarks/pool.py: this script's directory is on sys.path

        learners, collectors = (int(n) for n in args.pool.split(","))
        pool = service(out, learners, collectors)
    else:
        pool = nullcontext(None)
    with pool as url:
        on_pool = ["--service", url] if url else []
        found, shipped = search_and_compare(
            args, config, space, study, tune_out, out, [*on_pool, *sets], on_pool, stop_value
        )
    print(f"\nenv steps to the stop value on seeds {args.seeds} (None: not solved within the budget)")
    (shipped_median, shipped_mean), (found_median, found_mean) = summary(shipped), summary(found)
    print(f"  shipped {args.config} {' '.join(args.set)}: {shipped}  median {shipped_median:g} mean {shipped_mean:g}")
    print(f"  best trial's config:   {found}  median {found_median:g} mean {found_mean:g}")
    # steps to solve come in evaluations (every eval_freq iterations): one seed's two counts a few steps apart are
    # the same evaluation
    faster = sum(f is not None and (s is None or f < s - 100) for f, s in zip(found, shipped))
    slower = sum(s is not None and (f is None or f > s + 100) for f, s in zip(found, shipped))
    print(
        f"  best / shipped: medians {found_median / shipped_median:.2f}, means {found_mean / shipped_mean:.2f}; "
        f"faster on {faster} seed(s), slower on {slower}, the same evaluation on the rest (below 1: faster)"
    )
    print(f"everything in {out}")
    return 0


def search_and_compare(args, config, space, study, tune_out, out, sets, on_pool, stop_value) -> tuple:
    """The search, then the shipped config and the best trial's on the fresh seeds: (found, shipped)."""
    cli(
        "tune",
        "-c",
        config,
        "--trials",
        str(args.trials),
        "--space",
        space,
        "--objective",
        "solve-steps",
        "--seeds",
        args.trial_seeds,
        "--out",
        tune_out,
        "--parallel",
        str(args.parallel),
        *sets,
    )
    best = os.path.join(tune_out, study, "best_config.py")
    shipped = steps_to_solve(config, args.seeds, os.path.join(out, "shipped"), args.parallel, sets, stop_value)
    found = steps_to_solve(best, args.seeds, os.path.join(out, "best"), args.parallel, on_pool, stop_value)
    return found, shipped


if __name__ == "__main__":
    sys.exit(main())
