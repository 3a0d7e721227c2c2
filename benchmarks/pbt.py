"""Does PBT pay (issue 44's Measure)? Population-based training of K members against the best fixed setting of the
same population, at equal total env steps.

    .venv/bin/python benchmarks/pbt.py [-c configs/cartpole_ppo.py] [--population 4] [--interval 20000]
        [--max-env-step 200000] [--space SPACE.py] [--sampler-seed 0] [--parallel 1] [--out DIR] [--png curves.png]
        [--pool LEARNERS,COLLECTORS] [--set KEY=VALUE ...]

Both arms draw the same K settings from the space (Optuna's random sampler with --sampler-seed: `pbt` and `sweep
--random` draw alike) and train each for --max-env-step env steps, K x that in all:

- PBT: `parallel-rl pbt --population K --interval T --max-env-step N --space SPACE`; its score is the best member's
  final evaluation return;
- fixed: `parallel-rl sweep --random K --space SPACE --set run.max_env_step=N` (every setting kept from start
  to end); its score is the best trial's final evaluation return.

With ``--pool L,C`` (a cluster config, e.g. ``configs/minatar_breakout_ppo_parallel.py``) a service with L learner
and C collector slots is started first (benchmarks/pool.py's ``service``) and both arms train on its pool: ``pbt
--service`` (each member step a run started from the member's, or after an exploit the source's, last learner
state) and ``sweep --service``.

Prints both scores and PBT / fixed (target: >= 1, the issue's "PBT's final score >= the best fixed one's"), with
each arm's table; --png draws both arms' mean curves with bootstrap bands (`parallel-rl compare --group`). The
default space (PPO: learning rate, epochs per segment, entropy weight, clip ratio) fits configs/cartpole_ppo.py and
the MinAtar PPO configs. The config's stop value is turned off (`env.stop_value=null`) so that every run trains its
whole budget; pass --set env.stop_value=... to keep one. The members' seeds differ (PBT gives member k the config's
seed + k; the sweep's trials all take the config's seed): one run of this script is one draw of the comparison, not
a verdict.
"""

from __future__ import annotations

import argparse
import csv
import math
import os
import subprocess
import sys
import tempfile
import time
from contextlib import nullcontext
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

PPO_SPACE = """
def space(trial):
    return {
        "policy.learn.learning_rate": trial.suggest_float("learning_rate", 1e-4, 3e-3, log=True),
        "policy.learn.epoch_per_collect": trial.suggest_int("epoch_per_collect", 2, 10),
        "policy.learn.entropy_weight": trial.suggest_float("entropy_weight", 0.0, 0.05),
        "policy.learn.clip_ratio": trial.suggest_float("clip_ratio", 0.1, 0.3),
    }
"""


def cli(args: list, log: Path) -> tuple:
    """A `parallel-rl` command to its end, its output in ``log``; (exit code, seconds)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    start = time.perf_counter()
    with open(log, "w") as f:
        code = subprocess.run([sys.executable, "-m", "parallel_rl", *args], stdout=f, stderr=subprocess.STDOUT, env=env)
    return code.returncode, time.perf_counter() - start


def best(path: Path, column: str) -> float:
    """The highest finite ``column`` of a table (NaN when none)."""
    with open(path, newline="") as f:
        scores = [float(row[column]) for row in csv.DictReader(f) if row[column] not in ("", "nan")]
    scores = [s for s in scores if math.isfinite(s)]
    return max(scores) if scores else math.nan


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("-c", "--config", default=str(ROOT / "configs" / "cartpole_ppo.py"))
    parser.add_argument("--population", type=int, default=4)
    parser.add_argument("--interval", type=int, default=20_000, help="env steps between exploits")
    parser.add_argument("--max-env-step", type=int, default=200_000, help="env steps of each member and trial")
    parser.add_argument("--space", default=None, help="a space file (default: PPO's learning rate, epochs, ...)")
    parser.add_argument("--sampler-seed", type=int, default=0)
    parser.add_argument("--parallel", type=int, default=1, help="members / trials trained at once")
    parser.add_argument("--out", default=None, help="where both arms' runs go (default: a temporary directory)")
    parser.add_argument("--png", default=None, help="both arms' curves (mean and bootstrap band) to this file")
    parser.add_argument("--pool", default=None, metavar="LEARNERS,COLLECTORS", help="both arms on a service's pool")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")
    args = parser.parse_args()

    out = Path(args.out or tempfile.mkdtemp(prefix="prl-pbt-bench-")).resolve()
    out.mkdir(parents=True, exist_ok=True)
    space = args.space
    if space is None:
        space = str(out / "space.py")
        Path(space).write_text(PPO_SPACE)
    sets = [arg for text in ["env.stop_value=null", *args.overrides] for arg in ("--set", text)]
    common = ["-c", args.config, "--space", space, "--sampler-seed", str(args.sampler_seed)]
    common += ["--parallel", str(args.parallel), *sets]
    print(
        f"pbt benchmark: {args.config}, K={args.population}, T={args.interval}, N={args.max_env_step} env steps a "
        f"member ({args.population * args.max_env_step} in all per arm), runs in {out}",
        flush=True,
    )

    pbt_out, fixed_out = out / "pbt", out / "fixed"
    if args.pool:
        sys.path.insert(0, str(ROOT / "benchmarks"))
        from pool import service  # benchmarks/pool.py

        learners, collectors = (int(n) for n in args.pool.split(","))
        pool = service(str(out), learners, collectors)
    else:
        pool = nullcontext(None)
    with pool as url:
        on_pool = ["--service", url] if url else []
        pbt_code, pbt_wall = cli(
            ["pbt", *common, *on_pool, "--population", str(args.population), "--interval", str(args.interval)]
            + ["--max-env-step", str(args.max_env_step), "--out", str(pbt_out)],
            out / "pbt.log",
        )
        fixed_code, fixed_wall = cli(
            ["sweep", *common, *on_pool, "--random", str(args.population), "--out", str(fixed_out)]
            + ["--set", f"run.max_env_step={args.max_env_step}"],
            out / "fixed.log",
        )
    for name, code, wall, log in (
        ("pbt", pbt_code, pbt_wall, out / "pbt.log"),
        ("fixed", fixed_code, fixed_wall, out / "fixed.log"),
    ):
        print(f"{name}: exit {code}, {wall:.0f} s; its output: {log}", flush=True)
    if not (pbt_out / "pbt.csv").exists() or not (fixed_out / "results.csv").exists():
        print("pbt benchmark: an arm wrote no table; see its output above", file=sys.stderr)
        return 1
    print((pbt_out / "pbt.csv").read_text(), flush=True)
    print((fixed_out / "results.csv").read_text(), flush=True)

    pbt_score, fixed_score = best(pbt_out / "pbt.csv", "score"), best(fixed_out / "results.csv", "eval_return")
    ratio = pbt_score / fixed_score if fixed_score not in (0.0,) and math.isfinite(fixed_score) else math.nan
    print(f"PBT (best member's final eval return): {pbt_score:.4g}", flush=True)
    print(f"fixed (best setting's final eval return): {fixed_score:.4g}", flush=True)
    print(f"PBT / fixed: {ratio:.3f} (target >= 1)", flush=True)
    if args.png and args.pool:  # a pool member's steps are runs of their own (no stitched curve): pbt.jsonl has them
        print("curves: not drawn on the pool (each member step is a run of its own; see pbt/pbt.jsonl)", flush=True)
    elif args.png:
        members = ",".join(str(p) for p in sorted(pbt_out.glob("trial_*")) if p.is_dir())
        trials = ",".join(str(p) for p in sorted(fixed_out.glob("trial_*")) if p.is_dir())
        code, _ = cli(
            ["compare", "--group", f"pbt={members}", "--group", f"fixed={trials}", "--png", args.png],
            out / "compare.log",
        )
        print(f"curves: {args.png} (exit {code}; output {out / 'compare.log'})", flush=True)
    return 0 if pbt_code in (0,) and fixed_code in (0,) else 1


if __name__ == "__main__":
    sys.exit(main())
