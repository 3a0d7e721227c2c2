"""Configs assembled: every component brings the defaults of its own section, and ``compile_config(user_cfg)``
merges the user's values over them (:mod:`.schema`: unknown keys and bad types raise ConfigError, naming the
key and the closest valid one).

The top floor of configs: it imports the components (inside the functions, so that importing the config
package stays cheap and torch-free).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Dict, Iterable, List, Mapping, Optional, Tuple, Type

from easydict import EasyDict

from ..errors import ConfigError
from ..compat import keys as compat_keys
from .section import Section, setting
from .schema import _type_name, apply_overrides, coerce, load_config_file, merge, normalise, validate


@dataclasses.dataclass(frozen=True)
class RunSection(Section):
    """What ends a run and how often it is evaluated, the same in the serial pipeline and the cluster: the stop
    value (exit 0 when an evaluation reaches it) and the budgets (reaching one ends the run: exit 0 with no stop
    value, else 3, the stop value was not reached). With neither a stop value nor a budget a run trains until it
    is stopped (Ctrl-C, SIGTERM), as before. DI-engine's keys for these (``serial.max_*``,
    ``parallel.commander.max_*``, ``env.stop_value``, ``eval_freq``) are translated at the edge
    (:mod:`parallel_rl.compat.keys`)."""

    path = "run"
    title = "Budgets, stop value, evaluations (serial and cluster)"

    max_env_step: int = setting(0, lo=0, doc="budget: stop after this many env steps (0: none)")
    max_train_iter: int = setting(0, lo=0, doc="budget: stop after this many train iterations (0: none)")
    max_seconds: float = setting(0.0, lo=0, doc="budget: stop after this many seconds (0: none)")
    stop_value: Optional[float] = setting(
        195.0,
        nullable=True,
        doc="""the mean evaluation return that ends the run
        (exit 0); None (or inf): no stop value, the run trains to its budget""",
    )
    eval_freq: int = setting(
        200, lo=1, doc="evaluate every N learner iterations (on the newest policy), serial and cluster alike"
    )

    @classmethod
    def check_setting(cls, name: str, value: Any, key: str) -> None:
        super().check_setting(name, value, key)
        if name == "stop_value" and value is not None and (math.isnan(value) or value == -math.inf):
            raise ConfigError(
                f"{key} must be a number, or None (or inf) for no stop value: the run trains to its budget; "
                f"got {value!r}"
            )


def parallel_default_config() -> EasyDict:
    """The ``parallel`` section: the cluster's shared store and each cluster component's own section, each from
    beside the component that reads it."""
    from ..collector.defaults import CollectorSection
    from ..coordinator.defaults import commander_default_config, coordinator_default_config
    from ..entry.defaults import supervisor_default_config
    from ..learner.defaults import learner_default_config
    from ..slave.defaults import worker_default_config
    from ..storage.defaults import storage_default_config

    return EasyDict(
        **storage_default_config(),
        coordinator=coordinator_default_config(),
        commander=commander_default_config(),
        collector=CollectorSection.defaults(),
        learner=learner_default_config(),
        supervisor=supervisor_default_config(),
        worker=worker_default_config(),
    )


def default_config(policy_type: str = "dqn", battle: bool = False) -> EasyDict:
    """The full default tree; each section comes from its component, ``policy`` from ``policy_type``'s.

    ``battle`` (``env.type = "pettingzoo"``, a two-player game): the battle collector and evaluator bring
    their keys, and a ``league`` section (opponent pool, payoff table, PFSP) is added."""
    from ..data.buffer import buffer_default_config
    from ..envs.env_manager import EnvManager
    from ..policy.spec import policy_spec
    from ..runtime import system_default_config
    from ..collector.serial import SampleSerialCollector
    from ..evaluator.serial import InteractionSerialEvaluator
    from ..learner.learner import BaseLearner

    policy = policy_spec(policy_type).defaults()
    if battle:
        from ..league import League
        from ..collector.battle import BattleSampleSerialCollector
        from ..evaluator.battle import BattleInteractionSerialEvaluator

        policy.collect.collector = BattleSampleSerialCollector.default_config()
        policy.eval.evaluator = BattleInteractionSerialEvaluator.default_config()
        policy.nstep = 1  # each row spans one own move unless the config asks for n-step rows
    else:
        policy.collect.collector = SampleSerialCollector.default_config()
        policy.eval.evaluator = InteractionSerialEvaluator.default_config()
    policy.learn.learner = BaseLearner.default_config()
    # on-policy data goes to a segment buffer (whole segments, used and dropped), off-policy data to replay
    policy.other.replay_buffer = buffer_default_config(default_buffer_type(policy))
    tree = EasyDict(
        exp_name="default_experiment",
        seed=0,
        env=EnvManager.default_config(),
        policy=policy,
        run=RunSection.defaults(),
        parallel=parallel_default_config(),
        system=system_default_config(),
    )
    if battle:
        tree.env.type = "pettingzoo"
        tree.league = League.default_config()
        tree.parallel.commander.type = "league"  # the cluster keeps the opponent pool and payoff table
    return tree


def top_sections(
    policy_type: str = "dqn", battle: bool = False, buffer_type: Optional[str] = None
) -> List[Type[Section]]:
    """The typed sections of the config tree with policy ``policy_type`` (each knows its dotted path; sections
    inside them are theirs), in the reference's order. ``battle``: a two-player game's (its collector, the
    ``league``); ``buffer_type``: the replay buffer's (None: the one the policy's data flow picks). A registered
    policy or buffer that brings no section has none here."""
    from ..collector.defaults import BattleCollectorSection, CollectorSection, SerialCollectorSection
    from ..coordinator.defaults import CommanderSection, CoordinatorSection
    from ..data.buffer import buffer_section
    from ..entry.defaults import SupervisorSection
    from ..evaluator.defaults import BattleEvaluatorSection, SerialEvaluatorSection
    from ..envs.defaults import EnvSection
    from ..league import LeagueSection
    from ..learner.defaults import BaseLearnerSection, LearnerSection
    from ..policy.spec import policy_spec
    from ..runtime import SystemSection
    from ..slave.defaults import WorkerSection
    from ..storage.defaults import StorageSection

    spec = policy_spec(policy_type)
    policy = spec.typed
    buffer = buffer_section(buffer_type or default_buffer_type(spec.defaults()))
    return [
        EnvSection,
        *([policy] if policy else []),
        BaseLearnerSection,
        BattleCollectorSection if battle else SerialCollectorSection,
        BattleEvaluatorSection if battle else SerialEvaluatorSection,
        *([buffer] if buffer else []),
        RunSection,
        SystemSection,
        StorageSection,
        CoordinatorSection,
        CommanderSection,
        CollectorSection,
        LearnerSection,
        SupervisorSection,
        WorkerSection,
        *([LeagueSection] if battle else []),
    ]


def sections(
    policy_type: str = "dqn", battle: bool = False, buffer_type: Optional[str] = None
) -> List[Tuple[str, Type[Section]]]:
    """``(path, section)`` of every typed section of the tree with policy ``policy_type`` (and ``battle``,
    ``buffer_type``: as :func:`top_sections`), those inside others included."""
    return [pair for section in top_sections(policy_type, battle, buffer_type) for pair in section.walk()]


def key_range(key: str, policy_type: str = "dqn") -> Dict[str, Any]:
    """The range of the typed setting at dotted ``key`` (``lo``/``hi`` inclusive, ``above``/``below``
    exclusive; None: no bound) in the tree with policy ``policy_type``; {} for a key no typed section declares
    (an open section's, such as ``env.env_kwargs.*``). What a search clips a perturbed value to (PBT's explore)."""
    path, _, name = key.rpartition(".")
    for section_path, section in sections(policy_type):
        if section_path == path:
            for f in section.fields():
                if f.name == name and f.metadata.get("section") is None:
                    return {bound: f.metadata.get(bound) for bound in ("lo", "hi", "above", "below")}
    return {}


def section_values(cfg: Mapping, path: str) -> Mapping:
    """The values of the section at the dotted ``path`` of a compiled config."""
    for key in path.split("."):
        cfg = cfg[key]
    return cfg


def check_sections(cfg: Mapping) -> None:
    """Each typed section's check (its fields' ranges and choices, then its relations) on a compiled config."""
    battle = cfg["env"]["type"] == "pettingzoo"
    for section in top_sections(cfg["policy"]["type"], battle, cfg["policy"]["other"]["replay_buffer"]["type"]):
        section.check(section_values(cfg, section.path))


def default_buffer_type(policy_cfg: Mapping) -> str:
    """The replay buffer type a policy's data flow needs: ``advanced`` for replay, ``segment`` for synchronous
    and ``rollout`` for asynchronous on-policy data."""
    from ..data.flows import flow_of

    return flow_of(policy_cfg).default_buffer_type


def _user_section(user_cfg: Mapping, path: str) -> Mapping:
    """The user's section at the dotted ``path`` ({} where absent), read before the merge checks the types: a
    section that is not a dict is the merge's ConfigError naming it (it was an AttributeError: a connect body
    with ``"config": {"env": 5}`` got a 500)."""
    section, keys = user_cfg, path.split(".")
    for depth, key in enumerate(keys):
        section = section.get(key, {})
        if not isinstance(section, Mapping):
            raise ConfigError(
                f"{'.'.join(keys[: depth + 1])} must be a dict, got {section!r:.80} ({_type_name(section)})"
            )
    return section


def translate_user_config(user_cfg: Mapping, mode: Optional[str] = None) -> dict:
    """``user_cfg`` with DI-engine's keys translated (:func:`parallel_rl.compat.keys.translate`) for ``mode``
    (``serial``, ``cluster``; None: :func:`parallel_rl.compat.keys.mode_of`), each translated value checked
    first under the key the user wrote (its type, its range)."""
    mode = mode or compat_keys.mode_of(user_cfg)
    written = compat_keys.origins(user_cfg, mode)
    tree = compat_keys.translate(user_cfg, mode)
    defaults = RunSection.defaults()
    for name, key in written.items():
        RunSection.check_setting(name, coerce(key, defaults[name], tree["run"][name]), key)
    return tree


def compile_config(user_cfg: Mapping | None = None, mode: Optional[str] = None) -> EasyDict:
    """Merge ``user_cfg`` over the defaults; unknown keys and bad types raise ConfigError. DI-engine's keys are
    translated first, as ``mode`` reads them (``serial``, ``cluster``; None: the mode the tree's keys say,
    :func:`parallel_rl.compat.keys.mode_of`); a compiled config compiles to itself."""
    from ..data.buffer import buffer_default_config

    user_cfg = translate_user_config(dict(user_cfg or {}), mode)
    # the policy type brings its own keys (ppo, sac, ... or a registered one)
    battle = _user_section(user_cfg, "env").get("type", "gymnasium") == "pettingzoo"
    user_policy = _user_section(user_cfg, "policy")
    defaults = default_config(user_policy.get("type", "dqn"), battle=battle)
    # The replay buffer's keys depend on its type: use that type's defaults (the flow the user picks decides it)
    buf_type = _user_section(user_cfg, "policy.other.replay_buffer").get(
        "type", default_buffer_type({**defaults.policy, **user_policy})
    )
    defaults.policy.other.replay_buffer = buffer_default_config(buf_type)
    cfg = EasyDict(merge("", defaults, user_cfg))
    normalise(cfg)
    check_sections(cfg)
    validate(cfg)
    from ..data.flows import flow_of

    flow_of(cfg.policy).check_config(cfg)
    from ..policy.device import DEVICES  # the values the policy knows (the schema imports no component)

    if cfg.policy.device not in DEVICES:
        raise ConfigError(f"policy.device must be one of 'cpu', 'cuda', 'auto', got {cfg.policy.device!r}")
    from ..policy.defaults import OPTIMIZERS

    optimizer = cfg.policy.learn.get("optimizer", "adam")
    if optimizer not in OPTIMIZERS:
        raise ConfigError(f"policy.learn.optimizer must be one of {', '.join(OPTIMIZERS)}, got {optimizer!r}")
    return cfg


def load_config(path: str | None, overrides: Iterable[str] = (), mode: Optional[str] = None) -> EasyDict:
    """File + overrides -> compiled config (what every CLI command uses), DI-engine's keys read as ``mode``
    reads them (``serial``, ``cluster``; None: as the tree's keys say)."""
    user = load_config_file(path) if path else {}
    return compile_config(apply_overrides(user, overrides), mode)


def load_cluster_config(path: str | None, overrides: Iterable[str] = ()) -> EasyDict:
    """The config of a cluster training (``run``, ``coordinator``, a run of the service), checked against what the
    cluster trains, the env (its spaces fit the algorithm) and the machine (the device) before any process starts."""
    from ..envs.fit import check_env_fits
    from .schema import check_cluster_config

    cfg = load_config(path, overrides, mode="cluster")
    check_cluster_config(cfg)
    check_env_fits(cfg)
    return cfg


# the keys that say what a config is (its name, algorithm and env): a config states them even at their default
IDENTITY_KEYS = ("exp_name", "env.type", "env.env_id", "policy.type")


def restated_defaults(user_cfg: Mapping) -> List[str]:
    """The dotted keys of ``user_cfg`` (a config file's dict) whose value is the default it would compile to
    anyway (the defaults of its own policy type, env type and buffer type), :data:`IDENTITY_KEYS` aside: a
    config states only what differs from the defaults."""
    from ..data.buffer import buffer_default_config

    user_cfg = dict(user_cfg)
    battle = _user_section(user_cfg, "env").get("type", "gymnasium") == "pettingzoo"
    user_policy = _user_section(user_cfg, "policy")
    defaults = default_config(user_policy.get("type", "dqn"), battle=battle)
    flow_buffer = default_buffer_type({**defaults.policy, **user_policy})
    buf_type = _user_section(user_cfg, "policy.other.replay_buffer").get("type", flow_buffer)
    defaults.policy.other.replay_buffer = buffer_default_config(buf_type)
    defaults.policy.other.replay_buffer.type = flow_buffer  # the type the flow picks when the config names none
    out: List[str] = []
    legacy = compat_keys.legacy_keys(compat_keys.mode_of(user_cfg))  # DI-engine's keys: their run.* defaults
    legacy_sections = {key.rpartition(".")[0] for key in legacy}

    def walk(path: str, user: Mapping, default: Mapping) -> None:
        for key, value in user.items():
            key_path = f"{path}.{key}" if path else str(key)
            if key_path in legacy:
                if _same(value, section_values(defaults, legacy[key_path])):
                    out.append(key_path)
                continue
            if key_path in legacy_sections and key not in default and isinstance(value, Mapping):
                walk(key_path, value, {})  # serial: gone from the tree, its keys are run.*
                continue
            if key not in default or key_path in IDENTITY_KEYS:
                continue
            if isinstance(value, Mapping) and isinstance(default[key], Mapping):
                if default[key]:  # an open dict (env_kwargs) has no defaults below it
                    walk(key_path, value, default[key])
            elif _same(value, default[key]):
                out.append(key_path)

    walk("", user_cfg, defaults)
    return out


def _same(value: object, default: object) -> bool:
    """Whether ``value`` is ``default`` as the config compiles it (1 is 1.0; a tuple is a list; True is not 1)."""
    if isinstance(value, bool) or isinstance(default, bool):
        return type(value) is type(default) and value == default
    if isinstance(value, (list, tuple)) and isinstance(default, (list, tuple)):
        return len(value) == len(default) and all(_same(v, d) for v, d in zip(value, default))
    return value == default and (value is None) == (default is None)
