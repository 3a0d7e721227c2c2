"""The typed config sections (parallel_rl/config/section.py): every bounded field of every section refuses a value
just outside its range (and a wrong choice) through compile_config, naming the key and the value; the generated
configuration reference is current."""

import dataclasses
import pathlib
import re
import subprocess
import sys

import pytest

from parallel_rl.config import compile_config
from parallel_rl.config.assembly import sections
from parallel_rl.config.section import Section, bounded, setting
from parallel_rl.errors import ConfigError


def just_outside(f: dataclasses.Field) -> list:
    """Values just outside field ``f``'s range, one per bound it has (a wrong choice for a choice field)."""
    m, whole = f.metadata, isinstance(f.default, int) and not isinstance(f.default, bool)
    step = 1 if whole else 0.5
    if m["choices"] is not None:
        return ["not-" + "-".join(map(str, m["choices"]))]
    out = []
    if m["lo"] is not None:
        out.append(m["lo"] - step)
    if m["above"] is not None:
        out.append(m["above"])
    if m["hi"] is not None:
        out.append(m["hi"] + step)
    if m["below"] is not None:
        out.append(m["below"])
    return out


def nested(path: str, key: str, value) -> dict:
    """``{"a": {"b": {key: value}}}`` for the dotted ``path`` "a.b"."""
    tree = {key: value}
    for part in reversed(path.split(".")):
        tree = {part: tree}
    return tree


# the user config that brings a variant's sections: a replay buffer type's, a two-player game's
VARIANTS = {"battle": {"env": {"type": "pettingzoo"}}}


def variant(name: str) -> dict:
    return VARIANTS.get(name) or {"policy": {"other": {"replay_buffer": {"type": name}}}}


def cases():
    """(policy type, variant, section path, key, value just outside its range) for every bounded field of every
    section: each algorithm's policy section under its own policy.type, each replay buffer type's section under
    that type, a two-player game's sections (collector, league) under env.type='pettingzoo'."""
    from parallel_rl.data.buffer import BUFFER_REGISTRY
    from parallel_rl.policy.spec import POLICIES

    walks = [(policy_type, "", sections(policy_type)) for policy_type in POLICIES]
    walks += [("dqn", name, sections("dqn", buffer_type=name)) for name in BUFFER_REGISTRY.names()]
    walks.append(("dqn", "battle", sections("dqn", battle=True)))
    out = {}
    for policy_type, kind, walked in walks:
        for path, section in walked:
            owner = policy_type if path.startswith("policy") and not kind else "dqn"  # the other sections once
            kinds = ("policy.other.replay_buffer", "league", "policy.collect.collector", "policy.eval.evaluator")
            where = kind if path.startswith(kinds) else ""
            for f in filter(bounded, section.fields()):
                for value in just_outside(f):
                    out[(owner, where, path, f.name, repr(value))] = value
    return [
        pytest.param(
            policy_type, kind, path, key, value, id=f"{policy_type}:{kind + ':' if kind else ''}{path}.{key}={shown}"
        )
        for (policy_type, kind, path, key, shown), value in out.items()
    ]


CASES = cases()


def test_the_walk_covers_every_section_and_bounded_key():
    # a walk over nothing passes: the sections and their bounded keys are there to walk
    walked = {(case.values[0], case.values[2], case.values[3]) for case in CASES}
    assert len(walked) >= 150
    assert {
        "parallel.worker",
        "parallel.coordinator",
        "parallel.commander",
        "parallel.learner",
        "system",
        "run",
        "env",
        "policy",
        "policy.learn",
        "policy.model.encoder",
        "policy.other.eps",
        "policy.learn.learner.hook",
        "policy.other.replay_buffer",
        "league",
    } <= {p for _, p, _ in walked}
    kinds = {(case.values[1], case.values[2], case.values[3]) for case in CASES}
    assert {
        ("advanced", "policy.other.replay_buffer", "alpha"),
        ("rollout", "policy.other.replay_buffer", "max_use"),
        ("episode", "policy.other.replay_buffer", "replay_buffer_size"),
        ("battle", "league", "pfsp_weighting"),
        ("battle", "policy.eval.evaluator.max_loss_rate", "first"),
        ("", "policy.eval.evaluator", "record_every"),
    } <= kinds
    assert {
        ("td3", "policy.learn", "policy_noise"),
        ("td3", "policy.learn", "policy_delay"),
        ("sac", "policy.learn", "learning_rate_q"),
    } <= walked


def merged(*trees: dict) -> dict:
    out: dict = {}
    for tree in trees:
        for key, value in tree.items():
            out[key] = merged(out.get(key, {}), value) if isinstance(value, dict) else value
    return out


@pytest.mark.parametrize("policy_type, kind, path, key, value", CASES)
def test_every_value_just_outside_its_range_is_a_config_error_naming_key_and_value(policy_type, kind, path, key, value):
    user = merged(variant(kind) if kind else {}, nested(path, key, value))
    user.setdefault("policy", {}).setdefault("type", policy_type)
    with pytest.raises(ConfigError, match=re.escape(f"{path}.{key}={value!r}")):
        compile_config(user)


def test_a_section_checks_its_fields_and_relations_in_isolation():
    @dataclasses.dataclass(frozen=True)
    class Toy(Section):
        path = "toy"
        rate: float = setting(0.5, above=0, hi=1, doc="a rate")
        mode: str = setting("a", choices=("a", "b"), doc="a mode")
        limit: int = setting(None, lo=1, nullable=True, doc="None: no limit")

    assert Toy.defaults() == {"rate": 0.5, "mode": "a", "limit": None}
    Toy.check({"rate": 1, "mode": "b", "limit": None})
    for values, match in [
        ({"rate": 0, "mode": "a", "limit": None}, r"toy needs rate in \(0, 1\], got toy.rate=0"),
        ({"rate": 0.5, "mode": "c", "limit": None}, r"toy needs mode one of 'a', 'b', got toy.mode='c'"),
        ({"rate": 0.5, "mode": "a", "limit": 0}, r"toy needs limit >= 1, or None, got toy.limit=0"),
        ({"rate": float("nan"), "mode": "a", "limit": 1}, r"toy.rate=nan"),
        ({"rate": True, "mode": "a", "limit": 1}, r"toy.rate=True"),
    ]:
        with pytest.raises(ConfigError, match=match):
            Toy.check(values)


def test_the_configuration_reference_is_current():
    # docs/configuration.md is generated from the fields: a field added, bounded or documented differently fails
    # this until `python -m parallel_rl.config.reference` is run again
    done = subprocess.run(
        [sys.executable, "-m", "parallel_rl.config.reference", "--check"], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr


@pytest.mark.parametrize(
    "user, match",
    [
        ({"policy": {"type": "td3", "learn": {"policy_noise": -1}}}, r"policy.learn.policy_noise=-1"),
        ({"policy": {"type": "td3", "learn": {"policy_delay": 0}}}, r"policy.learn.policy_delay=0"),
        ({"policy": {"type": "sac", "learn": {"learning_rate_q": -1}}}, r"policy.learn.learning_rate_q=-1"),
        ({"serial": {"max_env_step": -5}}, r"serial.max_env_step=-5"),
        ({"parallel": {"commander": {"max_seconds": -1.0}}}, r"parallel.commander.max_seconds=-1.0"),
        ({"env": {"stop_value": float("nan")}}, r"env.stop_value must be a number, or None \(or inf\)"),
    ],
)
def test_the_bad_values_of_issue_42_are_refused_at_compile_time(user, match):
    # each of these compiled and failed only once a worker built the policy, or never (learning_rate_q: the
    # project's own Adam skips torch's check)
    with pytest.raises(ConfigError, match=match):
        compile_config(user)


def test_an_infinite_stop_value_compiles_to_none_which_crosses_json():
    # inf crossed JSON as null and broke every cluster evaluator; it means "no stop value" and compiles to None
    import json

    cfg = compile_config({"env": {"stop_value": float("inf")}})
    assert cfg.run.stop_value is None
    assert json.loads(json.dumps(cfg.run, allow_nan=False))["stop_value"] is None


def test_a_users_algorithm_comes_in_by_register_policy_with_its_section_and_bounds():
    from parallel_rl.policy import POLICY_ACTION_SPACES, POLICY_DEFAULTS, PolicySpec, register_policy
    from parallel_rl.policy.defaults import DQNLearn, DQNSection
    from parallel_rl.policy.spec import POLICIES

    @dataclasses.dataclass(frozen=True)
    class MyLearn(DQNLearn):
        temperature: float = setting(1.0, above=0, doc="my algorithm's temperature")

    @dataclasses.dataclass(frozen=True)
    class MySection(DQNSection):
        type: str = setting("mine", doc="the algorithm")
        learn: dict = setting(MyLearn, doc="training")

    try:
        register_policy(PolicySpec("mine", "parallel_rl.policy.dqn:DQNPolicy", MySection, ("discrete", "box")))
        assert compile_config({"policy": {"type": "mine"}}).policy.learn.temperature == 1.0
        assert POLICY_ACTION_SPACES["mine"] == ("discrete", "box") and POLICY_DEFAULTS["mine"]().type == "mine"
        with pytest.raises(ConfigError, match=r"policy.learn.temperature=0.0"):
            compile_config({"policy": {"type": "mine", "learn": {"temperature": 0.0}}})
        # the seed form: a defaults function, no bounds beyond the schema's types
        register_policy(
            "mine_too", "parallel_rl.policy.dqn:DQNPolicy", lambda: {**DQNSection.defaults(), "type": "mine_too"}
        )
        assert compile_config({"policy": {"type": "mine_too"}}).policy.learn.batch_size == 64
    finally:
        POLICIES.pop("mine", None)
        POLICIES.pop("mine_too", None)
    with pytest.raises(ConfigError, match=r"unknown policy.type 'mine'"):
        compile_config({"policy": {"type": "mine"}})


CONFIGS = pathlib.Path(__file__).resolve().parent.parent / "configs"


def _flat(tree: dict, prefix: str = "") -> dict:
    """Every dotted key of ``tree``, sections included, with its value."""
    out = {}
    for key, value in tree.items():
        out[f"{prefix}{key}"] = value
        if isinstance(value, dict):
            out.update(_flat(value, f"{prefix}{key}."))
    return out


def stated_defaults(path: pathlib.Path) -> list:
    """The keys config ``path`` states at their default (restated_defaults), less those it inherits from the
    configs it builds on (``runpy.run_path`` of another config: that one's to answer for) and those it sets back
    to the default over a base's other value (it has to state those)."""
    from parallel_rl.config import load_config_file
    from parallel_rl.config.assembly import restated_defaults

    bases = [CONFIGS / name for name in re.findall(r'"(\w+\.py)"', path.read_text()) if (CONFIGS / name).exists()]
    inherited = set().union(*(_flat(load_config_file(str(base))) for base in bases))
    return [key for key in restated_defaults(load_config_file(str(path))) if key not in inherited]


@pytest.mark.parametrize("name", sorted(p.name for p in CONFIGS.glob("*.py")))
def test_a_shipped_config_states_only_what_differs_from_the_defaults(name):
    # a restated default hides the keys that matter, and goes stale when the default moves
    assert stated_defaults(CONFIGS / name) == []


def test_a_restated_default_is_found(tmp_path):
    config = tmp_path / "restating.py"
    config.write_text(
        'main_config = dict(exp_name="x", seed=0, env=dict(env_id="CartPole-v1", stop_value=195),\n'
        '                   policy=dict(type="ppo", learn=dict(batch_size=64, epoch_per_collect=3),\n'
        '                               other=dict(replay_buffer=dict(type="naive"))))\n'
    )
    assert stated_defaults(config) == ["seed", "env.stop_value", "policy.learn.batch_size"]


def test_a_two_player_collector_trains_players_0_or_1():
    battle = {"env": {"type": "pettingzoo"}}
    assert compile_config(merged(battle, {"policy": {"collect": {"collector": {"trained_players": [0, 1]}}}}))
    for players in ([], [2], [0, -1]):
        user = merged(battle, {"policy": {"collect": {"collector": {"trained_players": players}}}})
        with pytest.raises(ConfigError, match=re.escape(f"policy.collect.collector.trained_players={players!r}")):
            compile_config(user)


def test_a_buffer_or_league_built_without_compile_config_is_checked_by_its_section():
    # library users build them from their own dicts: the same bounds, the same message
    from parallel_rl.data.buffer import create_buffer
    from parallel_rl.league import League

    for cfg, match in [
        ({"type": "advanced", "alpha": 1.5}, r"policy.other.replay_buffer.alpha=1.5"),
        ({"type": "segment", "max_use": 0}, r"policy.other.replay_buffer.max_use=0"),
        ({"type": "rollout", "max_use": 2}, r"policy.other.replay_buffer.max_use=2"),
        ({"type": "naive", "replay_buffer_size": 0}, r"policy.other.replay_buffer.replay_buffer_size=0"),
    ]:
        with pytest.raises(ConfigError, match=match):
            create_buffer(cfg)
    assert create_buffer({"type": "advanced", "alpha": 1.0}).capacity == 20000
    with pytest.raises(ConfigError, match=r"league.self_play_prob=1.5"):
        League({"self_play_prob": 1.5})


def test_a_component_reads_its_section_as_a_frozen_instance():
    from parallel_rl.learner.defaults import BaseLearnerSection, LearnerHooksSection, LearnerSection

    cfg = compile_config({"parallel": {"learner": {"prefetch_batches": 3}}})
    section = LearnerSection.read(cfg)
    assert (section.prefetch_batches, section.chunk_cache_size) == (3, 512)
    with pytest.raises(dataclasses.FrozenInstanceError):
        section.prefetch_batches = 4
    learner = BaseLearnerSection.read(cfg)
    assert isinstance(learner.hook, LearnerHooksSection) and learner.hook.log_show_after_iter == 500
