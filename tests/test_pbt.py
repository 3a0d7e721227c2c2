"""Population-based training (parallel_rl.lab.pbt, issue 44 item 5) through the real CLI: `parallel-rl pbt`, each
member-step a real `parallel-rl serial` process (the first fresh, the later ones `--resume`) with a tiny budget.

The members train on ``parallel_rl_test/Flat-v0`` (tests/lab_env.py), whose every step earns the member's
``env.env_kwargs.reward`` whatever the action: each evaluation returns exactly 5 x that reward, so the ranking is
known from the draws. The space also draws ``policy.learn.update_per_collect``, so members that trained the same env
steps have different update counters: a member resumed from another's copied state says so with that one's counter.
"""

from __future__ import annotations

import json
import os
import re
import signal
import textwrap

import pytest

from tests.support import eventually
from tests.test_lab import lab as cli  # a `parallel-rl` command to its end, tests.lab_env importable
from tests.test_lab import lab_process, table

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# 16 env steps a collect (2 envs), an evaluation every 4 updates: a step of 32 env steps is exactly 2 collects
CONFIG = textwrap.dedent("""
    main_config = dict(
        env=dict(env_id="parallel_rl_test/Flat-v0", import_names=["tests.lab_env"], env_kwargs=dict(episode_length=5),
                 collector_env_num=2, evaluator_env_num=2, n_evaluator_episode=2, stop_value=None),
        policy=dict(model=dict(hidden_size_list=[16]), nstep=1, random_collect_size=0,
                    learn=dict(batch_size=8), collect=dict(n_sample=16), eval=dict(evaluator=dict(eval_freq=4))),
    )
""")
SPACE = """
    def space(trial):
        return {"env.env_kwargs.reward": trial.suggest_float("reward", 0.0, 1.0),
                "policy.learn.update_per_collect": trial.suggest_int("updates", 1, 8)}
"""
REWARD_EPISODE = 5  # steps an episode: an evaluation returns 5 x reward


@pytest.fixture
def config(tmp_path):
    path = tmp_path / "flat.py"
    path.write_text(CONFIG)
    return str(path)


def write_space(tmp_path, body: str = SPACE) -> str:
    path = tmp_path / "space.py"
    path.write_text(textwrap.dedent(body))
    return str(path)


def lineage(out):
    with open(out / "pbt.jsonl") as f:
        return [json.loads(line) for line in f]


def resumed(log_path):
    """(env_steps, train_iter) the member's latest step resumed from (the serial run's own line)."""
    match = re.search(r"^resumed (\S+): env_steps=(\d+) train_iter=(\d+)$", log_path.read_text(), re.M)
    assert match, log_path.read_text()[-2000:]
    return match.group(1), int(match.group(2)), int(match.group(3))


def explored(value, how, low, high, integer=False):
    """What explore makes of ``value`` moved ``how`` (``x0.8``, ``x1.2``), clipped to the space's [low, high]."""
    moved = min(max(value * float(how[1:]), low), high)
    return int(round(moved)) if integer else moved


@pytest.mark.slow
@pytest.mark.multirun
def test_the_bottom_member_copies_the_top_members_weights_and_hyperparameters_and_continues_from_them(tmp_path, config):
    out = tmp_path / "pbt"
    proc = cli(
        "pbt",
        "-c",
        config,
        "--population",
        "4",
        "--interval",
        "32",
        "--generations",
        "2",
        "--space",
        write_space(tmp_path),
        "--resample-probability",
        "0",
        "--out",
        str(out),
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    records = lineage(out)
    start = {r["member"]: r for r in records if r["event"] == "start"}
    assert sorted(start) == [0, 1, 2, 3]
    reward = {m: r["params"]["reward"] for m, r in start.items()}
    assert len(set(reward.values())) == 4
    best, worst = max(reward, key=reward.get), min(reward, key=reward.get)
    steps = [r for r in records if r["event"] == "step"]
    assert [(s["generation"], s["env_steps"]) for s in steps] == [(0, 32), (1, 64)]
    for member, score in steps[0]["scores"].items():  # ranked by the latest evaluation: 5 x the member's reward
        assert score == pytest.approx(REWARD_EPISODE * reward[int(member)], rel=1e-6)

    # exploit: K=4 and quantile 0.25 -> the one bottom member copies the one top member
    (exploit,) = [r for r in records if r["event"] == "exploit"]
    assert (exploit["generation"], exploit["member"], exploit["copied_from"]) == (0, worst, best)
    assert exploit["old_settings"] == start[worst]["settings"]
    assert exploit["source_settings"] == start[best]["settings"]
    assert exploit["source_params"] == start[best]["params"]
    # explore: each copied hyperparameter multiplied by 0.8 or 1.2 (no resampling), clipped to the space
    how = exploit["perturbation"]
    assert set(how.values()) <= {"x0.8", "x1.2"}
    new = exploit["new_params"]
    assert new["reward"] == pytest.approx(explored(reward[best], how["reward"], 0.0, 1.0))
    assert new["updates"] == explored(start[best]["params"]["updates"], how["updates"], 1, 8, integer=True)
    assert exploit["new_settings"] == {
        "env.env_kwargs.reward": new["reward"],
        "policy.learn.update_per_collect": new["updates"],
    }

    # the weights: the worst member's second step resumed the best member's saved state (its counters, which
    # differ from its own: the members drew different update counts), not its own and not a fresh start
    assert start[worst]["params"]["updates"] != start[best]["params"]["updates"]
    target_dir, target_steps, target_iters = resumed(out / f"trial_{worst:03d}.log")
    source_dir, source_steps, source_iters = resumed(out / f"trial_{best:03d}.log")
    assert (target_dir, source_dir) == (str(out / f"trial_{worst:03d}"), str(out / f"trial_{best:03d}"))
    assert (target_steps, target_iters) == (source_steps, source_iters) == (32, 2 * start[best]["params"]["updates"])
    for member in set(start) - {worst}:  # every other member resumed its own state
        assert resumed(out / f"trial_{member:03d}.log")[2] == 2 * start[member]["params"]["updates"]

    # the table: each member's final score is its latest evaluation, with the new reward for the explored one
    rows = {int(r["member"]): r for r in table(out / "pbt.csv")}
    assert [rows[m]["status"] for m in range(4)] == ["done"] * 4
    assert [int(rows[m]["env_steps"]) for m in range(4)] == [64] * 4
    assert float(rows[worst]["score"]) == pytest.approx(REWARD_EPISODE * new["reward"], rel=1e-6)
    for member in set(start) - {worst}:
        assert float(rows[member]["score"]) == pytest.approx(REWARD_EPISODE * reward[member], rel=1e-6)
        assert rows[member]["history"].count(" | ") == 0
    assert rows[worst]["history"].split(" | ")[1].startswith(f"1: from {best}: env.env_kwargs.reward=")
    assert re.search(r"^MEMBER +STATUS +SCORE +ENV_STEPS +SETTINGS +HISTORY +NOTE$", proc.stdout, re.M)

    # each member's curve is a run that `parallel-rl compare` reads
    runs = [str(out / f"trial_{m:03d}") for m in range(4)]
    compared = cli("compare", *runs, "--group-by", "name", "--csv", str(tmp_path / "compare.csv"), cwd=tmp_path)
    assert compared.returncode == 0, compared.stdout[-2000:] + compared.stderr[-2000:]
    finals = {r["group"]: float(r["final_score"]) for r in table(tmp_path / "compare.csv") if r["row"] == "run"}
    assert finals == {f"trial_{m:03d}": pytest.approx(float(rows[m]["score"]), rel=1e-6) for m in range(4)}


@pytest.mark.slow
@pytest.mark.multirun
def test_a_member_whose_training_fails_gets_its_reason_in_the_table_and_the_others_go_on(tmp_path, config):
    out = tmp_path / "pbt"
    proc = cli(
        "pbt",
        "-c",
        config,
        "--population",
        "4",
        "--interval",
        "32",
        "--generations",
        "2",
        "--space",
        write_space(tmp_path),
        "--set",
        "env.env_kwargs.fail_above=0.58",  # a member that draws a reward above it fails at its first env step
        "--resample-probability",
        "0",
        "--perturb",
        "0.8,0.9",  # no explored reward goes above the best survivor's
        "--out",
        str(out),
        cwd=tmp_path,
    )
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert proc.stderr.strip().splitlines()[-1] == (
        "parallel-rl pbt: 1 of 4 member(s) failed; their reasons are in the table"
    )
    start = {r["member"]: r for r in lineage(out) if r["event"] == "start"}
    failing = {m for m, r in start.items() if r["params"]["reward"] > 0.58}
    assert len(failing) == 1, start  # the sampler's draws with seed 0; the test needs one to fail, three to go on
    rows = {int(r["member"]): r for r in table(out / "pbt.csv")}
    for member, row in rows.items():
        if member in failing:
            assert row["status"] == "failed"
            assert re.fullmatch(
                r"RuntimeError: the flat env fails: reward 0\.\d+ > fail_above 0\.58 \(a test\)", row["note"]
            )
        else:
            assert (row["status"], int(row["env_steps"]), row["note"]) == ("done", 64, "")
    steps = [r for r in lineage(out) if r["event"] == "step"]
    assert sorted(map(int, steps[1]["scores"])) == sorted(set(range(4)) - failing)  # it trained no more
    (exploit,) = [r for r in lineage(out) if r["event"] == "exploit"]
    assert exploit["copied_from"] not in failing and exploit["member"] not in failing


BAD_SPACE = """
    def space(trial):
        return {"env.env_kwargs.reward": trial.suggest_float("reward", 0.0, 1.0),
                "policy.learn.learnin_rate": trial.suggest_float("lr", 1e-4, 1e-2)}
"""


@pytest.mark.parametrize(
    "args, message",
    [
        (
            ["--population", "1"],
            r"--population 1: a population needs 2 to 1000 members \(the bottom ones copy the top ones\); "
            r"e\.g\. --population 4",
        ),
        (["--quantile", "0.6"], r"--quantile 0\.6: give a fraction in \(0, 0\.5\] .*"),
        (["--quantile", "0"], r"--quantile 0\.0: give a fraction in \(0, 0\.5\] .*"),
        (["--interval", "0"], r"--interval 0: members train this many env steps between exploits; give > 0"),
        (["--perturb", "0.8,-1"], r"--perturb '0\.8,-1': give positive factors separated by commas, .*"),
        (["--resample-probability", "1.5"], r"--resample-probability 1\.5: give a probability in \[0, 1\]"),
        (["--max-env-step", "0"], r"--max-env-step 0: give the env steps each member trains, > 0"),
        (
            ["--space", "BAD"],
            r"unknown config key 'policy\.learn\.learnin_rate'; did you mean 'policy\.learn\.learning_rate'\?.*",
        ),
    ],
)
def test_bad_input_is_one_line_exit_2_before_anything_runs(tmp_path, config, args, message):
    out = tmp_path / "pbt"
    options = {"--population": "4", "--interval": "32", "--space": write_space(tmp_path), "--generations": "2"}
    pairs = dict(zip(args[::2], args[1::2]))
    if "--max-env-step" in pairs:  # the other way to say how long
        del options["--generations"]
    if pairs.get("--space") == "BAD":
        pairs["--space"] = write_space(tmp_path, BAD_SPACE)
    options.update(pairs)
    proc = cli("pbt", "-c", config, "--out", str(out), *[x for kv in options.items() for x in kv], cwd=tmp_path)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and re.fullmatch(r"parallel-rl pbt: error: " + message, lines[0]), proc.stderr
    assert not out.exists(), "nothing runs or is written"


def test_explore_moves_each_parameter_by_a_factor_or_a_draw_inside_the_space_and_the_configs_range(tmp_path):
    """Explore's bounds, over many draws: a factor's result clipped to the space (and to the config key's range:
    discount_factor <= 1, where the space goes to 1.5), a resampled value inside the space, a categorical one of
    its choices, an integer an integer."""
    import random

    from parallel_rl.lab.pbt import SearchSpace

    space = SearchSpace(
        write_space(
            tmp_path,
            """
            def space(trial):
                return {"policy.discount_factor": trial.suggest_float("gamma", 0.9, 1.5),
                        "policy.learn.learning_rate": trial.suggest_float("lr", 1e-4, 1e-2, log=True),
                        "policy.learn.update_per_collect": trial.suggest_int("updates", 1, 8),
                        "policy.model.hidden_size_list": [trial.suggest_categorical("width", [16, 32])]}
            """,
        ),
        seed=0,
    )
    params = space.draw()
    rng, seen = random.Random(0), set()
    for _ in range(300):
        new, how = space.explore(params, rng, (0.8, 1.2), 0.25, "dqn")
        seen.update(how.values())
        for name, (low, high) in {"gamma": (0.9, 1.0), "lr": (1e-4, 1e-2), "updates": (1, 8)}.items():
            assert low <= new[name] <= high, (name, new[name])
            if how[name] != "resampled":
                expected = params[name] * float(how[name][1:])
                expected = min(max(expected, low), high)
                assert new[name] == pytest.approx(round(expected) if name == "updates" else expected)
        assert isinstance(new["updates"], int) and new["width"] in (16, 32)
        assert how["width"] in ("kept", "resampled")
        assert space.settings(new)["policy.model.hidden_size_list"] == [new["width"]]
        params = new
    assert seen == {"x0.8", "x1.2", "resampled", "kept"}


@pytest.mark.slow
@pytest.mark.multirun
def test_ctrl_c_stops_every_member_and_says_where_the_results_are(tmp_path, config):
    out = tmp_path / "pbt"
    pbt = lab_process(
        tmp_path,
        "pbt",
        "-c",
        config,
        "--population",
        "2",
        "--interval",
        "100000000",
        "--generations",
        "2",
        "--space",
        write_space(tmp_path),
        "--out",
        str(out),
    )
    try:
        pbt.wait_line(r"^pbt: generation 0: 2 member\(s\) train to env step 100000000")
        log = out / "trial_000.log"
        eventually(
            lambda: log.exists() and "eval_return=" in log.read_text(),
            timeout=120,
            message="the first member's first evaluation",
        )
        os.killpg(pbt.pid, signal.SIGINT)  # Ctrl-C at the terminal: PBT's process group
        assert pbt.wait(120) == 130, pbt.output()[-3000:]
    finally:
        pbt.stop()
    assert f"the table of what ran is in {out / 'pbt.csv'}" in pbt.output()
    rows = table(out / "pbt.csv")
    assert [r["status"] for r in rows] == ["interrupted"] * 2
    assert log.read_text().rstrip().endswith("parallel-rl serial: interrupted")  # the training saved and exited
    assert not (out / "trial_001").exists()  # the other member never started
    assert not [r for r in lineage(out) if r["event"] == "exploit"]


@pytest.mark.slow
@pytest.mark.multirun
def test_a_resumed_run_trains_with_the_learning_rate_it_is_given_not_the_saved_one(tmp_path):
    """PBT's explore changes a member's learning rate between steps: the resumed run must use the new one (the
    optimizer's saved state once put its own learning rate back)."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from tensorboard.util import tensor_util

    run = tmp_path / "ppo"
    base = [
        "serial",
        "-c",
        os.path.join(ROOT, "configs", "cartpole_ppo.py"),
        "--set",
        "env.env_id=parallel_rl/Counting-v0",
        "--set",
        "env.env_kwargs={}",
        "--set",
        "env.stop_value=null",
        "--set",
        "policy.collect.n_sample=64",
        "--set",
        "policy.learn.batch_size=32",
        "--set",
        "policy.eval.evaluator.eval_freq=1",
        "--set",
        f"exp_name={run}",
    ]
    first = cli(*base, "--set", "policy.learn.learning_rate=0.001", "--set", "serial.max_env_step=64", cwd=tmp_path)
    assert first.returncode in (0, 3), first.stdout[-2000:] + first.stderr[-2000:]
    second = cli(
        *base,
        "--resume",
        str(run),
        "--set",
        "policy.learn.learning_rate=0.0005",
        "--set",
        "serial.max_env_step=192",
        cwd=tmp_path,
    )
    assert second.returncode in (0, 3), second.stdout[-2000:] + second.stderr[-2000:]
    acc = EventAccumulator(str(run / "tensorboard"), size_guidance={"tensors": 0})
    acc.Reload()
    rates = [float(tensor_util.make_ndarray(e.tensor_proto)) for e in acc.Tensors("learner/learning_rate")]
    assert rates and rates[0] == pytest.approx(0.001) and rates[-1] == pytest.approx(0.0005), rates
