"""`parallel-rl compare` through the real CLI: runs whose coordinator state is written by the store's own snapshot
writer (exact eval curves: known scores, so the IQM and its CI are checked against a direct computation), real
serial runs (their TensorBoard scalars and config.json), and bad input: one line, exit 2, nothing written."""

from __future__ import annotations

import csv
import os
import subprocess
import sys

import numpy as np
import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CARTPOLE = os.path.join(REPO, "configs", "cartpole_dqn.py")
# the final scores of group "wide": IQM 5.5 (the middle four: 3, 4, 6, 9), median 5, mean 21.875
WIDE = [1.0, 2.0, 3.0, 4.0, 6.0, 9.0, 50.0, 100.0]


def run_cli(*args: str, cwd=None, timeout: float = 120.0) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": REPO + os.pathsep + os.environ.get("PYTHONPATH", "")}
    return subprocess.run(
        [sys.executable, "-m", "parallel_rl", *args], capture_output=True, text=True, timeout=timeout, env=env, cwd=cwd
    )


def snapshot_run(run_dir, final: float, steps=(100, 200, 300, 400), config: dict | None = None) -> str:
    """A cluster run directory whose store holds a coordinator state (written by the store's snapshot writer, as
    the coordinator writes it) with evaluations at ``steps``: return ``final * k / len(steps)`` at the k-th, so the
    last is ``final``; ``config``: its config.json (written as a run writes it)."""
    from easydict import EasyDict

    from parallel_rl.config import save_run_config
    from parallel_rl.storage import SharedStorage

    history = [
        {
            "t": float(k),
            "policy_version": k,
            "env_steps": step,
            "train_iter": 10 * k,
            "eval_return": final * k / len(steps),
            "train_return": None,
        }
        for k, step in enumerate(steps, 1)
    ]
    SharedStorage(os.path.join(run_dir, "shared")).states.save(
        1, {"exp_name": str(run_dir), "eval_history": history}, {}
    )
    if config is not None:
        save_run_config(EasyDict(config), str(run_dir))
    return str(run_dir)


def read_csv(path) -> list:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def tree(path) -> dict:
    """Every file under ``path`` with its size and modification time (to see that nothing changed)."""
    return {
        os.path.join(d, f): (os.stat(os.path.join(d, f)).st_size, os.stat(os.path.join(d, f)).st_mtime_ns)
        for d, _, files in os.walk(path)
        for f in files
    }


@pytest.fixture(scope="module")
def fake(tmp_path_factory):
    """Group "wide" (8 seeds, final scores WIDE), "solo" (one run, final 7), "short" (a seed evaluated to 300 only)."""
    base = tmp_path_factory.mktemp("fake")
    wide = [snapshot_run(base / f"wide_s{i}", score) for i, score in enumerate(WIDE)]
    solo = snapshot_run(base / "solo", 7.0)
    short = [snapshot_run(base / "short_s0", 30.0, steps=(100, 200, 300)), snapshot_run(base / "short_s1", 40.0)]
    return {"base": base, "wide": wide, "solo": solo, "short": short}


def test_iqm_ci_median_mean_of_known_scores_and_the_csv(fake, tmp_path):
    out_csv = tmp_path / "scores.csv"
    out = run_cli("compare", *fake["wide"], fake["solo"], "--csv", str(out_csv), "--seed", "3")
    assert out.returncode == 0, out.stderr
    assert "scores at env step 400 (the smallest final env step among the runs)" in out.stdout
    rows = read_csv(out_csv)
    assert [r["row"] for r in rows] == ["run"] * 8 + ["group", "run", "group"]
    runs = [r for r in rows if r["row"] == "run" and r["group"] == "wide"]
    assert [r["run_dir"] for r in runs] == fake["wide"]
    assert [int(r["seed"]) for r in runs] == list(range(8))  # from the names' _s<N> suffixes
    assert [float(r["final_score"]) for r in runs] == WIDE and {r["final_env_steps"] for r in runs} == {"400"}
    wide = next(r for r in rows if r["row"] == "group" and r["group"] == "wide")
    assert (int(wide["runs"]), float(wide["iqm"]), float(wide["median"]), float(wide["mean"])) == (8, 5.5, 5.0, 21.875)
    low, high = float(wide["ci_low"]), float(wide["ci_high"])
    # a direct percentile bootstrap of the IQM over the 8 runs (numpy's own resampling, many more resamples)
    rng = np.random.default_rng(0)
    samples = np.sort(np.array(WIDE)[rng.integers(0, 8, size=(100_000, 8))], axis=1)
    direct = np.percentile(samples[:, 2:6].mean(axis=1), [2.5, 97.5])
    assert low < 5.5 < high and abs(low - direct[0]) <= 1.0 and abs(high - direct[1]) <= 3.0, (low, high, direct)
    solo = next(r for r in rows if r["row"] == "group" and r["group"] == "solo")
    assert float(solo["ci_low"]) == float(solo["ci_high"]) == float(solo["iqm"]) == 7.0
    assert "1 run" in solo["note"] and "note: solo: 1 run" in out.stdout
    again = run_cli("compare", *fake["wide"], fake["solo"], "--csv", str(tmp_path / "again.csv"), "--seed", "3")
    assert again.returncode == 0 and read_csv(tmp_path / "again.csv") == rows  # the same --seed, the same CIs


def test_scores_at_the_smallest_final_step_or_at_env_step(fake, tmp_path):
    out = run_cli("compare", *fake["short"], "--csv", str(tmp_path / "default.csv"))
    assert out.returncode == 0, out.stderr
    runs = [r for r in read_csv(tmp_path / "default.csv") if r["row"] == "run"]
    assert [(r["final_env_steps"], float(r["final_score"])) for r in runs] == [("300", 30.0), ("300", 30.0)]
    out = run_cli("compare", *fake["short"], "--at-env-step", "250", "--csv", str(tmp_path / "at.csv"))
    assert out.returncode == 0, out.stderr
    assert "scores at env step 250 (--at-env-step)" in out.stdout
    runs = [r for r in read_csv(tmp_path / "at.csv") if r["row"] == "run"]
    assert [(r["final_env_steps"], float(r["final_score"])) for r in runs] == [("200", 20.0), ("200", 20.0)]


def test_groups_by_config_by_name_and_by_group(tmp_path):
    config = {"env": {"env_id": "CartPole-v1"}, "policy": {"type": "dqn"}}
    a = snapshot_run(tmp_path / "lr_a", 1.0, config={**config, "exp_name": "lr_a", "seed": 5})
    b = snapshot_run(tmp_path / "lr_b", 3.0, config={**config, "exp_name": "lr_b", "seed": 6})
    c = snapshot_run(tmp_path / "lr_c", 8.0, config={**config, "policy": {"type": "ppo"}, "seed": 7})

    def groups(*args):
        out = run_cli("compare", *args, "--csv", str(tmp_path / "g.csv"))
        assert out.returncode == 0, out.stderr
        rows = read_csv(tmp_path / "g.csv")
        return {
            g["group"]: [(r["run_dir"], r["seed"]) for r in rows if r["row"] == "run" and r["group"] == g["group"]]
            for g in rows
            if g["row"] == "group"
        }

    # by config (the default): a and b differ in exp_name and seed only; seeds from config.json
    assert groups(a, b, c) == {"lr": [(a, "5"), (b, "6")], "lr_c": [(c, "7")]}
    assert groups(a, b, c, "--group-by", "name") == {"lr_a": [(a, "5")], "lr_b": [(b, "6")], "lr_c": [(c, "7")]}
    assert groups(c, "--group", f"ab={a},{b}") == {"ab": [(a, "5"), (b, "6")], "lr_c": [(c, "7")]}


@pytest.mark.slow
def test_real_serial_runs_grouped_by_config_with_curves(tmp_path):
    for name, seed in (("cart_a", 0), ("cart_b", 1)):
        done = run_cli(
            "serial",
            "-c",
            CARTPOLE,
            "--set",
            f"exp_name={tmp_path / name}",
            "--set",
            f"seed={seed}",
            "--set",
            "serial.max_env_step=600",
            "--set",
            "policy.eval.evaluator.eval_freq=10",
            timeout=240,
        )
        assert done.returncode == 3, done.stdout + done.stderr  # the budget ran out before the stop value
    runs = [str(tmp_path / "cart_a"), str(tmp_path / "cart_b")]
    out = run_cli("compare", *runs, "--csv", str(tmp_path / "c.csv"), "--png", str(tmp_path / "c.png"), "--reps", "500")
    assert out.returncode == 0, out.stderr
    rows = read_csv(tmp_path / "c.csv")
    assert [(r["row"], r["group"], r["seed"]) for r in rows] == [
        ("run", "cart", "0"),
        ("run", "cart", "1"),
        ("group", "cart", ""),
    ]
    scores = sorted(float(r["final_score"]) for r in rows[:2])
    assert float(rows[2]["iqm"]) == pytest.approx(np.mean(scores))  # two runs: the IQM is their mean
    assert float(rows[2]["ci_low"]) == pytest.approx(scores[0]) and float(rows[2]["ci_high"]) == pytest.approx(
        scores[1]
    )
    with open(tmp_path / "c.png", "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n"


@pytest.mark.slow
def test_a_real_cluster_run_by_its_experiment_directory_or_its_store(tmp_path):
    from parallel_rl.storage import SharedStorage
    from tests.test_cluster import TOY_CONFIG

    config = tmp_path / "toy.py"
    config.write_text(TOY_CONFIG)
    exp = tmp_path / "toy_s0"
    done = run_cli(
        "run", "-c", str(config), "--set", f"exp_name={exp}", "--collectors", "1", "--port", "0", timeout=240
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]  # solved
    history = SharedStorage(str(exp / "shared"), create=False).states.latest()[0]["eval_history"]
    for run_dir in (exp, exp / "shared"):
        out = run_cli("compare", str(run_dir), "--csv", str(tmp_path / "c.csv"))
        assert out.returncode == 0, out.stderr
        run, group = read_csv(tmp_path / "c.csv")
        assert (run["group"], run["seed"], group["group"]) == ("toy", "0", "toy")  # the exp_name its state holds
        # placed at the env steps its policy was trained on (when it was announced), not those when it came back
        assert 0 < history[-1]["policy_env_steps"] <= history[-1]["env_steps"]
        assert (float(run["final_env_steps"]), float(run["final_score"])) == (
            history[-1]["policy_env_steps"],
            history[-1]["eval_return"],
        )
    twice = run_cli("compare", str(exp), str(exp / "shared"))
    assert twice.returncode == 2 and "named twice" in twice.stderr, twice.stderr


@pytest.mark.parametrize(
    "case",
    ["missing dir", "not a run", "no evaluations", "a file", "bad group", "twice", "reps 0", "png suffix", "too early"],
)
def test_bad_input_is_one_line_exit_2_and_nothing_written(fake, tmp_path, case):
    from parallel_rl.storage import SharedStorage

    empty_state = tmp_path / "never_evaluated"
    SharedStorage(str(empty_state / "shared")).states.save(1, {"exp_name": str(empty_state), "eval_history": []}, {})
    (tmp_path / "not_a_run").mkdir()
    (tmp_path / "a_file").write_text("x")
    good = fake["wide"][:2]
    bad, args = {
        "missing dir": (str(tmp_path / "nope"), [*good, str(tmp_path / "nope")]),
        "not a run": (str(tmp_path / "not_a_run"), [*good, str(tmp_path / "not_a_run")]),
        "no evaluations": (str(empty_state), [str(empty_state), *good]),
        "a file": (str(tmp_path / "a_file"), [*good, str(tmp_path / "a_file")]),
        "bad group": ("--group", [*good, "--group", "nameless"]),
        "twice": (good[0], [*good, "--group", f"again={good[0]}"]),
        "reps 0": ("--reps", [*good, "--reps", "0"]),
        "png suffix": ("--png", [*good, "--png", str(tmp_path / "curves.jpg")]),
        "too early": ("--at-env-step", [*good, "--at-env-step", "50"]),
    }[case]
    before = tree(fake["base"])
    out = run_cli("compare", *args, "--csv", str(tmp_path / "out.csv"))
    assert out.returncode == 2, out.stdout + out.stderr
    assert "Traceback" not in out.stderr and len(out.stderr.strip().splitlines()) == 1, out.stderr
    assert out.stderr.startswith("parallel-rl compare: error: ") and bad in out.stderr, out.stderr
    assert out.stdout == "" and not (tmp_path / "out.csv").exists() and tree(fake["base"]) == before


@pytest.mark.parametrize(
    "command, hidden, words",
    [
        ("compare", "scipy", "comparing runs needs scipy: pip install 'parallel-rl[compare]'"),
        ("compare --png", "matplotlib", "drawing curves needs matplotlib: pip install 'parallel-rl[compare]'"),
        ("plot", "matplotlib", "drawing curves needs matplotlib: pip install 'parallel-rl[compare]'"),
    ],
)
def test_without_the_compare_extra_compare_and_plot_say_what_to_install(fake, tmp_path, command, hidden, words):
    """scipy and matplotlib come with the `compare` extra only (the Docker image has neither): one line saying what
    to install, exit 2, nothing written; it was a ModuleNotFoundError's traceback. The package is hidden from the
    command's interpreter as an uninstalled one is (an ImportError on import)."""
    name, *options = command.split()
    out_file = tmp_path / "out.png"
    args = {
        "compare": [
            name,
            *fake["wide"][:2],
            *(["--png", str(out_file)] if options else []),
            "--csv",
            str(tmp_path / "o.csv"),
        ],
        "plot": [name, *fake["wide"][:2], "-o", str(out_file)],
    }[name]
    hide = f"import sys; sys.modules[{hidden!r}] = None; from parallel_rl.cli import main; raise SystemExit(main())"
    env = {**os.environ, "PYTHONPATH": REPO + os.pathsep + os.environ.get("PYTHONPATH", "")}
    out = subprocess.run(
        [sys.executable, "-c", hide, *args], capture_output=True, text=True, timeout=120, env=env, cwd=tmp_path
    )
    assert out.returncode == 2, out.stdout + out.stderr
    assert out.stderr == f"parallel-rl {name}: error: {words}\n", out.stderr
    assert list(tmp_path.iterdir()) == []  # nothing written


def test_help_shows_an_example():
    out = run_cli("compare", "--help")
    assert out.returncode == 0 and "example:\n  parallel-rl compare " in out.stdout, out.stdout


def test_runs_that_ended_at_different_env_steps_are_scored_at_the_latest_first_evaluation_by_default(tmp_path):
    # one run evaluated only at 500 (it stopped at its stop value late), one that ended at 300
    late = snapshot_run(tmp_path / "late_s0", 9.0, steps=(500,))
    early = snapshot_run(tmp_path / "early_s0", 30.0, steps=(100, 200, 300))
    out = run_cli("compare", "--group", f"x={late},{early}", "--csv", str(tmp_path / "c.csv"))
    assert out.returncode == 0, out.stderr
    assert "scores at env step 500 (the latest first evaluation among the runs" in out.stdout
    runs = [r for r in read_csv(tmp_path / "c.csv") if r["row"] == "run"]
    assert [(r["final_env_steps"], float(r["final_score"])) for r in runs] == [("500", 9.0), ("300", 30.0)]
