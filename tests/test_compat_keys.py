"""DI-engine's config keys translated at the edge (parallel_rl/compat/keys.py): each key of each mode becomes
its ``run.*`` key, the other mode's keys are dropped with one INFO line, a key given twice with two values is a
ConfigError naming both, a bad value is refused under the key the user wrote, and a compiled config compiles to
itself."""

import json
import logging

import pytest

from parallel_rl.compat.keys import legacy_keys, mode_of, translate
from parallel_rl.config import compile_config, load_config
from parallel_rl.errors import ConfigError


def nested(key: str, value) -> dict:
    """``{"a": {"b": value}}`` for the dotted ``key`` "a.b"."""
    tree = value
    for part in reversed(key.split(".")):
        tree = {part: tree}
    return tree


# (mode, DI-engine key, a value that is not the default, the run key it becomes)
MAPPINGS = [
    ("serial", "env.stop_value", 42.0, "stop_value"),
    ("cluster", "env.stop_value", 42.0, "stop_value"),
    ("serial", "serial.max_env_step", 1234, "max_env_step"),
    ("serial", "serial.max_train_iter", 56, "max_train_iter"),
    ("serial", "serial.max_seconds", 7.5, "max_seconds"),
    ("serial", "policy.eval.evaluator.eval_freq", 9, "eval_freq"),
    ("cluster", "parallel.commander.max_env_step", 1234, "max_env_step"),
    ("cluster", "parallel.commander.max_train_iter", 56, "max_train_iter"),
    ("cluster", "parallel.commander.max_seconds", 7.5, "max_seconds"),
    ("cluster", "parallel.commander.eval_freq", 9, "eval_freq"),
]


def test_the_mappings_here_are_every_key_the_translation_knows():
    assert {(mode, key) for mode, key, _, _ in MAPPINGS} == {
        (mode, key) for mode in ("serial", "cluster") for key in legacy_keys(mode)
    }


@pytest.mark.parametrize("mode, key, value, name", MAPPINGS, ids=[f"{m}:{k}" for m, k, _, _ in MAPPINGS])
def test_each_di_engine_key_becomes_its_run_key_in_its_mode(mode, key, value, name):
    tree = translate(nested(key, value), mode)
    assert tree["run"] == {name: value}
    cfg = compile_config(nested(key, value), mode)
    assert cfg.run[name] == value
    assert cfg.run == {**compile_config({}).run, name: value}  # nothing else of the run section moved


def test_the_other_modes_keys_are_dropped_with_one_info_line(caplog):
    """A cluster config written over a serial one gives both modes' budgets; each mode keeps its own."""
    both = {
        "env": {"stop_value": 300},
        "serial": {"max_env_step": 100, "max_seconds": 5},
        "policy": {"eval": {"evaluator": {"eval_freq": 10, "max_seconds": 30.0}}},
        "parallel": {"commander": {"max_env_step": 200, "eval_freq": 20, "collector_task_env_steps": 64}},
    }
    with caplog.at_level(logging.INFO, logger="parallel_rl.compat.keys"):
        serial = compile_config(both, "serial")
    assert (serial.run.max_env_step, serial.run.max_seconds, serial.run.eval_freq) == (100, 5.0, 10)
    assert serial.run.stop_value == 300.0 and serial.parallel.commander.collector_task_env_steps == 64
    assert serial.policy.eval.evaluator.max_seconds == 30.0  # the evaluator's own keys stay
    lines = [r.getMessage() for r in caplog.records if r.name == "parallel_rl.compat.keys"]
    assert len(lines) == 1, lines
    assert "parallel.commander.max_env_step, parallel.commander.eval_freq ignored" in lines[0]

    caplog.clear()
    with caplog.at_level(logging.INFO, logger="parallel_rl.compat.keys"):
        cluster = compile_config(both, "cluster")
    assert (cluster.run.max_env_step, cluster.run.max_seconds, cluster.run.eval_freq) == (200, 0.0, 20)
    lines = [r.getMessage() for r in caplog.records if r.name == "parallel_rl.compat.keys"]
    assert len(lines) == 1 and "serial.max_env_step, serial.max_seconds, policy.eval.evaluator.eval_freq" in lines[0]


def test_a_tree_with_no_mode_named_is_read_as_its_keys_say():
    assert mode_of({"parallel": {"commander": {"max_env_step": 5}}, "serial": {"max_env_step": 6}}) == "cluster"
    assert mode_of({"serial": {"max_env_step": 6}, "parallel": {"learner": {}}}) == "serial"
    assert compile_config({"parallel": {"commander": {"max_train_iter": 8}}}).run.max_train_iter == 8
    assert compile_config({"serial": {"max_train_iter": 9}}).run.max_train_iter == 9


@pytest.mark.parametrize(
    "user, match",
    [
        (
            {"run": {"max_env_step": 10}, "serial": {"max_env_step": 20}},
            r"run.max_env_step=10 and serial.max_env_step=20 disagree",
        ),
        ({"run": {"stop_value": 1.0}, "env": {"stop_value": 2.0}}, r"run.stop_value=1.0 and env.stop_value=2.0"),
        (
            {"run": {"eval_freq": 5}, "policy": {"eval": {"evaluator": {"eval_freq": 6}}}},
            r"run.eval_freq=5 and policy.eval.evaluator.eval_freq=6",
        ),
    ],
)
def test_a_key_given_as_run_and_as_di_engines_with_two_values_is_an_error_naming_both(user, match):
    with pytest.raises(ConfigError, match=match) as raised:
        compile_config(user, "serial")
    assert "\n" not in str(raised.value)


def test_a_key_given_twice_with_one_value_is_that_value():
    """inf and None are both "no stop value"; 200 and 200.0 one budget."""
    cfg = compile_config({"run": {"stop_value": None, "max_seconds": 200}, "env": {"stop_value": float("inf")},
                          "serial": {"max_seconds": 200.0}}, "serial")  # fmt: skip
    assert cfg.run.stop_value is None and cfg.run.max_seconds == 200.0


def test_the_cluster_key_of_a_serial_run_does_not_conflict_with_run():
    cfg = compile_config({"run": {"max_env_step": 10}, "parallel": {"commander": {"max_env_step": 20}}}, "serial")
    assert cfg.run.max_env_step == 10


@pytest.mark.parametrize(
    "user, mode, match",
    [
        ({"serial": {"max_train_iter": -1}}, "serial", r"^serial needs max_train_iter >= 0, got serial.max_train_iter=-1$"),
        ({"parallel": {"commander": {"eval_freq": 0}}}, "cluster", r"^parallel.commander needs eval_freq >= 1, got parallel.commander.eval_freq=0$"),
        ({"policy": {"eval": {"evaluator": {"eval_freq": 0}}}}, "serial", r"^policy.eval.evaluator needs eval_freq >= 1"),
        ({"serial": {"max_env_step": "lots"}}, "serial", r"^serial.max_env_step must be int, got 'lots' \(str\)$"),
        ({"env": {"stop_value": float("nan")}}, "cluster", r"^env.stop_value must be a number, or None \(or inf\)"),
        ({"run": {"stop_value": float("-inf")}}, "cluster", r"^run.stop_value must be a number, or None \(or inf\)"),
        ({"run": {"eval_freq": 0}}, "serial", r"^run needs eval_freq >= 1, got run.eval_freq=0$"),
        ({"serial": {"max_env_stp": 5}}, "serial", r"^unknown config key 'serial.max_env_stp'; did you mean 'serial.max_env_step'\?$"),
    ],
)  # fmt: skip
def test_a_bad_value_is_refused_naming_the_key_the_user_wrote(user, mode, match):
    with pytest.raises(ConfigError, match=match):
        compile_config(user, mode)


@pytest.mark.parametrize(
    "path, mode",
    [
        ("configs/cartpole_dqn.py", "serial"),
        ("configs/cartpole_dqn_parallel.py", "cluster"),
        ("configs/halfcheetah_sac_parallel.py", "cluster"),
        ("configs/halfcheetah_sac_parallel.py", "serial"),
        ("configs/tictactoe_selfplay.py", "serial"),
    ],
)
def test_a_compiled_config_compiles_to_itself(path, mode):
    """Workers compile the tree the coordinator sends them (JSON): no DI-engine key is left in it to translate."""
    cfg = load_config(path, mode=mode)
    assert "serial" not in cfg and "stop_value" not in cfg.env and "eval_freq" not in cfg.parallel.commander
    assert compile_config(cfg, mode) == cfg
    assert compile_config(json.loads(json.dumps(cfg)), "cluster") == cfg
    assert compile_config(json.loads(json.dumps(cfg)), "serial") == cfg


def test_translate_leaves_the_users_tree_as_it_is():
    user = {"serial": {"max_env_step": 5}, "env": {"stop_value": 3}}
    translate(user, "serial")
    assert user == {"serial": {"max_env_step": 5}, "env": {"stop_value": 3}}
    with pytest.raises(ValueError, match="mode must be one of"):
        translate(user, "parallel")


@pytest.mark.parametrize(
    "file, sets, mode, expected",
    [
        # --set run.X over a file's DI-engine key of either mode
        ({"serial": {"max_env_step": 100}}, ["run.max_env_step=7"], "serial", 7),
        ({"parallel": {"commander": {"max_env_step": 100}}}, ["run.max_env_step=7"], "cluster", 7),
        # --set of the mode's DI-engine key over a file's run.X
        ({"run": {"max_env_step": 100}}, ["serial.max_env_step=7"], "serial", 7),
        ({"run": {"max_env_step": 100}}, ["parallel.commander.max_env_step=7"], "cluster", 7),
        # the other mode's key in the file stays that mode's: a cluster run keeps its own budget
        ({"parallel": {"commander": {"max_env_step": 100}}}, ["serial.max_env_step=7"], "cluster", 100),
    ],
)
def test_an_override_of_a_run_setting_wins_over_the_file_whichever_name_each_uses(file, sets, mode, expected):
    """`--set run.max_env_step=N` on a config that writes serial.max_env_step (most shipped ones) was a conflict
    error ("disagree: give the run's max_env_step once"); an override is the user's last word."""
    from parallel_rl.config import apply_overrides, compile_config

    base = {"env": {"env_id": "CartPole-v1"}, **file}
    assert compile_config(apply_overrides(base, sets), mode).run.max_env_step == expected


def test_a_file_that_names_a_run_setting_twice_is_still_refused():
    from parallel_rl.config import compile_config

    with pytest.raises(ConfigError, match="disagree"):
        compile_config({"run": {"max_env_step": 5}, "serial": {"max_env_step": 6}}, "serial")
