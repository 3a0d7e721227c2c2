import pathlib

import pytest

from parallel_rl.config import apply_overrides, compile_config, load_config, load_config_file, parse_override
from parallel_rl.errors import ConfigError


def test_defaults_have_every_component_section():
    cfg = compile_config({})
    assert cfg.env.env_id == "CartPole-v1"
    assert cfg.policy.learn.batch_size == 64
    assert cfg.policy.other.replay_buffer.type == "advanced"
    assert cfg.run.eval_freq > 0
    assert "hook" in cfg.policy.learn.learner
    assert cfg.system.torch_num_threads == 1


def test_user_values_merge_deeply_over_defaults():
    cfg = compile_config({"policy": {"learn": {"batch_size": 32}}, "env": {"stop_value": 100}})
    assert cfg.policy.learn.batch_size == 32
    assert cfg.policy.learn.learning_rate == 1e-3  # sibling default kept
    assert cfg.run.stop_value == 100.0 and isinstance(cfg.run.stop_value, float)


def test_unknown_key_names_key_and_closest_valid_one():
    with pytest.raises(ConfigError, match=r"'policy\.learn\.batch_sze'.*did you mean 'policy\.learn\.batch_size'"):
        compile_config({"policy": {"learn": {"batch_sze": 3}}})


def test_unknown_top_level_key():
    with pytest.raises(ConfigError, match="unknown config key 'nonsense'"):
        compile_config({"nonsense": 1})


@pytest.mark.parametrize(
    "user, match",
    [
        ({"policy": {"learn": {"batch_size": "big"}}}, "batch_size must be int"),
        ({"policy": {"learn": {"double": 1}}}, "double must be bool"),
        ({"policy": {"learn": 5}}, "policy.learn must be a dict"),
        (
            {"policy": {"learn": {"batch_size": 0}}},
            r"policy.learn needs batch_size >= 1, got policy.learn.batch_size=0",
        ),
        ({"policy": {"discount_factor": 1.5}}, "discount_factor"),
        ({"policy": {"other": {"replay_buffer": {"type": "nope"}}}}, "unknown buffer type 'nope'"),
        # the PPO family's learn keys: epoch_per_collect=-1 once ran a whole budget without an update
        (
            {"policy": {"type": "ppo", "learn": {"epoch_per_collect": -1}}},
            r"policy.learn needs epoch_per_collect >= 1, got policy.learn.epoch_per_collect=-1",
        ),
        (
            {"policy": {"type": "ppo", "learn": {"gae_lambda": 1.5, "clip_ratio": 0.0}}},
            r"policy.learn needs clip_ratio > 0, got policy.learn.clip_ratio=0.0",
        ),
        (
            {"policy": {"type": "impala", "learn": {"entropy_weight": -0.01}}},
            r"policy.learn needs entropy_weight >= 0, got policy.learn.entropy_weight=-0.01",
        ),
        (
            {"policy": {"type": "dqn", "learn": {"learning_rate": 0.0}}},
            r"policy.learn needs learning_rate > 0, got policy.learn.learning_rate=0.0",
        ),
        # budgets: 0 is none, a negative one used to be accepted (and meant none)
        ({"serial": {"max_env_step": -1}}, r"serial needs max_env_step >= 0, got serial.max_env_step=-1"),
        ({"serial": {"max_seconds": -0.5}}, r"serial needs max_seconds >= 0, got serial.max_seconds=-0.5"),
        (
            {"parallel": {"commander": {"max_train_iter": -10}}},
            r"parallel.commander needs max_train_iter >= 0, got parallel.commander.max_train_iter=-10",
        ),
        ({"env": {"stop_value": float("nan")}}, r"env.stop_value must be a number, or None .* got nan"),
        ({"env": {"stop_value": float("-inf")}}, r"env.stop_value must be a number, or None .* got -inf"),
        # what strangers' connections may hold (#41): a budget below one request head refuses every stranger
        (
            {"parallel": {"coordinator": {"read_ahead_bytes": 1000}}},
            r"read_ahead_bytes >= 65536, got .*read_ahead_bytes=1000",
        ),
        (
            {"parallel": {"coordinator": {"max_connections_per_peer": 0}}},
            r"max_connections_per_peer >= 1, got .*max_connections_per_peer=0",
        ),
    ],
)
def test_bad_values_are_config_errors(user, match):
    with pytest.raises(ConfigError, match=match):
        compile_config(user)


def test_buffer_keys_follow_buffer_type():
    cfg = compile_config({"policy": {"other": {"replay_buffer": {"type": "naive"}}}})
    assert "alpha" not in cfg.policy.other.replay_buffer
    with pytest.raises(ConfigError, match="alpha"):
        compile_config({"policy": {"other": {"replay_buffer": {"type": "naive", "alpha": 0.5}}}})


def test_open_dicts_accept_any_keys():
    cfg = compile_config({"env": {"env_kwargs": {"episode_length": 7}}})
    assert cfg.env.env_kwargs.episode_length == 7


@pytest.mark.parametrize(
    "text, parts, value",
    [
        ("a.b=3", ["a", "b"], 3),
        ("a=0.5", ["a"], 0.5),
        ("a=true", ["a"], True),
        ("a=[64, 64]", ["a"], [64, 64]),
        ("a=hello", ["a"], "hello"),
        ('a="3"', ["a"], "3"),
        ("a=", ["a"], ""),
        ("a=inf", ["a"], float("inf")),
        ("a=-Inf", ["a"], float("-inf")),
        ("a=infinite", ["a"], "infinite"),
    ],
)
def test_parse_override(text, parts, value):
    assert parse_override(text) == (parts, value)


@pytest.mark.parametrize("text", ["novalue", "=3", "a..b=1", ".a=1"])
def test_parse_override_rejects_malformed(text):
    with pytest.raises(ConfigError, match="--set"):
        parse_override(text)


def test_overrides_apply_before_validation():
    user = apply_overrides({"env": {"stop_value": 1}}, ["env.stop_value=400", "policy.learn.batch_size=128"])
    cfg = compile_config(user)
    assert cfg.run.stop_value == 400 and cfg.policy.learn.batch_size == 128


def test_a_stop_value_of_inf_on_the_command_line_trains_to_the_budget():
    assert compile_config(apply_overrides({"env": {"stop_value": 1}}, ["run.stop_value=inf"])).run.stop_value is None
    with pytest.raises(ConfigError, match="stop_value"):
        compile_config(apply_overrides({}, ["run.stop_value=nan"]))


def test_load_config_file(tmp_path):
    path = tmp_path / "c.py"
    path.write_text("main_config = dict(exp_name='x', env=dict(stop_value=5))\n")
    assert load_config_file(str(path))["exp_name"] == "x"
    assert load_config(str(path), ["env.stop_value=7"]).run.stop_value == 7


def test_load_config_file_errors(tmp_path):
    with pytest.raises(ConfigError, match="not found"):
        load_config_file(str(tmp_path / "missing.py"))
    bad = tmp_path / "bad.py"
    bad.write_text("x = 1\n")
    with pytest.raises(ConfigError, match="main_config"):
        load_config_file(str(bad))
    broken = tmp_path / "broken.py"
    broken.write_text("main_config = dict(\n")
    with pytest.raises(ConfigError, match="failed to load"):
        load_config_file(str(broken))


@pytest.mark.parametrize("written", [None, float("inf")])
def test_no_stop_value_is_none_in_the_compiled_config_and_survives_json(written):
    """A run without a stop value trains to its budget: None, or inf as a user may write it (DI-engine's
    configs do), compiles to None, which JSON carries to the cluster's workers (inf turned into null there)."""
    import json

    cfg = compile_config({"env": {"stop_value": written}})
    assert cfg.run.stop_value is None
    assert compile_config(json.loads(json.dumps(cfg, allow_nan=False))).run.stop_value is None


YAML_CONFIG = """\
# the same keys as a Python config (RL Zoo style hyperparameter file)
exp_name: yaml_run
env:
  env_id: parallel_rl/Counting-v0
  env_kwargs: {episode_length: 5}
  collector_env_num: 2
  stop_value: .inf
policy:
  model:
    hidden_size_list: [16, 16]
  learn:
    learning_rate: 1e-4
    batch_size: 16
serial:
  max_train_iter: 30
"""

PY_CONFIG = """\
main_config = dict(
    exp_name="yaml_run",
    env=dict(env_id="parallel_rl/Counting-v0", env_kwargs=dict(episode_length=5), collector_env_num=2,
             stop_value=float("inf")),
    policy=dict(model=dict(hidden_size_list=[16, 16]), learn=dict(learning_rate=1e-4, batch_size=16)),
    serial=dict(max_train_iter=30),
)
"""


@pytest.mark.parametrize("suffix", [".yaml", ".yml"])
def test_a_yaml_config_loads_equal_to_the_same_python_config(tmp_path, suffix):
    (tmp_path / "c.py").write_text(PY_CONFIG)
    (tmp_path / f"c{suffix}").write_text(YAML_CONFIG)
    from_yaml = load_config(str(tmp_path / f"c{suffix}"), ["policy.learn.batch_size=32"])
    assert from_yaml == load_config(str(tmp_path / "c.py"), ["policy.learn.batch_size=32"])
    assert from_yaml.policy.learn.learning_rate == 1e-4 and from_yaml.run.stop_value is None


@pytest.mark.parametrize(
    "name, text, match",
    [
        ("c.json", "{}", r"'.*c.json' is neither a Python \(.py\) nor a YAML \(.yaml, .yml\) config file"),
        ("c.yml", "- just\n- a list\n", r"c.yml must hold a mapping of config keys at its top level, got list"),
        ("c.yml", "", r"c.yml must hold a mapping of config keys at its top level, got NoneType"),
        ("c.yaml", "env: {stop_value: 1\npolicy: [\n", r"c.yaml is not valid YAML: .* line \d+, column \d+$"),
    ],
)
def test_config_files_of_other_kinds_are_one_line_config_errors(tmp_path, name, text, match):
    (tmp_path / name).write_text(text)
    with pytest.raises(ConfigError, match=match) as raised:
        load_config_file(str(tmp_path / name))
    assert "\n" not in str(raised.value)


def test_shipped_configs_compile():
    for path in ("configs/cartpole_dqn.py",):
        cfg = load_config(path)
        assert cfg.run.stop_value == 195


CONFIGS = pathlib.Path(__file__).parent.parent / "configs"
BUDGET_CONFIGS = sorted(
    p.name
    for pattern in ("halfcheetah_*.py", "hopper_*.py", "minatar_*.py", "breakout_*.py")
    for p in CONFIGS.glob(pattern)
)


@pytest.mark.parametrize("name", BUDGET_CONFIGS)
def test_shipped_benchmark_configs_train_to_their_budget_with_no_stop_value(name):
    """The MuJoCo, MinAtar and Atari configs run to a budget: no stop value (they used stop_value=100_000, so a
    complete run ended with exit 3, read as a failure by scripts), and a budget in the mode they are for."""
    cfg = load_config(str(CONFIGS / name), mode="cluster" if name.endswith("_parallel.py") else "serial")
    assert cfg.run.stop_value is None
    assert any(cfg.run[key] > 0 for key in ("max_env_step", "max_train_iter", "max_seconds"))


def test_parallel_section_is_each_cluster_components_own_defaults():
    # each cluster component keeps its section's defaults beside it; the assembly only gathers them
    from parallel_rl.collector.base import BaseParallelCollector
    from parallel_rl.config import default_config
    from parallel_rl.worker import Coordinator
    from parallel_rl.coordinator.commander import commander_default_config
    from parallel_rl.entry.defaults import supervisor_default_config
    from parallel_rl.learner.defaults import learner_default_config
    from parallel_rl.slave.link import worker_default_config
    from parallel_rl.storage.shared import storage_default_config

    own = dict(
        storage_default_config(),
        coordinator=Coordinator.default_config(),
        commander=commander_default_config(),
        collector=BaseParallelCollector.default_config(),
        learner=learner_default_config(),
        supervisor=supervisor_default_config(),
        worker=worker_default_config(),
    )
    parallel = default_config().parallel
    assert list(parallel) == list(own) and parallel == own
    assert parallel.shared_dir == "" and parallel.coordinator.heartbeat_ttl == 10.0 and parallel.worker.max_retries == 3
    parallel.learner.publish_every = 1  # each call builds the sections anew: a change does not reach the next
    assert (
        default_config().parallel.learner == learner_default_config() and learner_default_config().publish_every == 50
    )
