"""The ``env`` section of the run config: which env, how many copies, how they are stepped. A
module of its own, importing only the config's section type: the config's assembly reads it without loading
gymnasium."""

from __future__ import annotations

import dataclasses
from typing import Any, Dict, List, Mapping, Optional

from ..config.section import Section, setting
from ..errors import ConfigError

ENV_TYPES = ("gymnasium", "pettingzoo")
VECTOR_MODES = ("auto", "vector_entry_point", "sync", "async")
PETTINGZOO_APIS = ("auto", "aec", "parallel")
ACTION_MASK_MODES = ("required", "none")
MAX_STEP_LATENCY_MS = 60_000


@dataclasses.dataclass(frozen=True)
class EnvSection(Section):
    """Which env, how many copies the collectors and evaluators step, and how."""

    path = "env"
    title = "Environment"

    type: str = setting(
        "gymnasium",
        choices=ENV_TYPES,
        doc="""gymnasium, or pettingzoo (a two-player zero-sum
        game: see parallel_rl.envs.multiagent)""",
    )
    env_id: str = setting(
        "CartPole-v1",
        doc="""a gymnasium id, or for pettingzoo a module with env()/parallel_env()
        or "module:factory\"""",
    )
    collector_env_num: int = setting(8, lo=1, doc="envs each collector steps")
    evaluator_env_num: int = setting(8, lo=1, doc="envs each evaluator steps")
    n_evaluator_episode: int = setting(8, lo=1, doc="episodes per evaluation")
    vector_mode: str = setting("auto", choices=VECTOR_MODES, doc="how the collectors' envs are vectorised")
    evaluator_vector_mode: Optional[str] = setting(
        None,
        choices=VECTOR_MODES,
        nullable=True,
        doc="""the evaluators'
        envs (None: vector_mode). async steps an evaluation's envs at once, each in its own process: for envs that
        wait (a remote simulator, step_latency_ms), an evaluation then takes its longest episode's steps x the
        latency instead of evaluator_env_num x that""",
    )
    env_kwargs: Dict[str, Any] = setting(
        {},
        doc="""kwargs for gymnasium.make_vec (any keys): for ALE ids those of
        ale_py's AtariVectorEnv (frameskip, stack_num, noop_max, reward_clipping, life_loss_info, ...)""",
    )
    eval_env_kwargs: Dict[str, Any] = setting(
        {},
        doc="""evaluators' envs: these go over env_kwargs (any keys; Atari:
        reward_clipping=False and life_loss_info=False, so evaluations report whole-game returns)""",
    )
    import_names: List[str] = setting([], doc="modules to import so that their envs register with gymnasium")
    pettingzoo_api: str = setting("auto", choices=PETTINGZOO_APIS, doc="pettingzoo: which factory of a module to use")
    action_mask: str = setting(
        "required",
        choices=ACTION_MASK_MODES,
        doc="""pettingzoo: required (the game must give
        action masks) or none (every action always legal)""",
    )
    step_latency_ms: float = setting(
        0.0,
        lo=0,
        below=MAX_STEP_LATENCY_MS,
        doc="""> 0: every step and reset of each
        sub-env takes this many ms of wall time, asleep (a simulator on another machine; see
        parallel_rl.envs.latency for how it adds up in sync and async vector envs); gymnasium envs only""",
    )
    mask_velocity: Any = setting(
        None,
        doc="""zero the velocity entries (envs/masked.py): true (CartPole, Pendulum) or
        a list of indices; null: off""",
    )

    @classmethod
    def check_relations(cls, values: Mapping[str, Any], path: str) -> None:
        if values["step_latency_ms"] and values["type"] != "gymnasium":
            raise ConfigError(
                f"{path}.step_latency_ms must be 0 unless env.type='gymnasium', got "
                f"{values['step_latency_ms']!r} with env.type={values['type']!r}"
            )
