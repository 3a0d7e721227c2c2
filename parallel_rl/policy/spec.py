"""One spec per algorithm: :class:`PolicySpec` (its name, its class, its section with the defaults and bounds,
the action spaces it trains on, its data flow), and :func:`register_policy`, the one door by which the built-in
algorithms and users' own come in. Torch-free: the coordinator and the config's assembly read it."""

from __future__ import annotations

import dataclasses
import difflib
from typing import Any, Callable, Dict, Iterator, Mapping, Optional, Tuple, Type, Union

from easydict import EasyDict

from ..config.section import Section
from ..errors import ConfigError
from .defaults import APPOSection, DQNSection, ImpalaSection, PPOSection, R2D2Section, SACSection, TD3Section

ACTION_SPACES = ("discrete", "box")


@dataclasses.dataclass(frozen=True)
class PolicySpec:
    """An algorithm: ``name`` (``policy.type``), ``target`` (``"module:Class"``, imported on first use),
    ``section`` (its ``policy`` section: a :class:`~parallel_rl.config.section.Section` whose fields carry the
    defaults, bounds and docs, or a function returning the defaults of an algorithm with no typed section) and
    ``action_spaces`` (``"discrete"``, ``"box"``)."""

    name: str
    target: str
    section: Union[Type[Section], Callable[[], Mapping]]
    action_spaces: Tuple[str, ...] = ("discrete",)

    def __post_init__(self) -> None:
        object.__setattr__(self, "action_spaces", tuple(self.action_spaces))
        if ":" not in self.target:
            raise ConfigError(f"PolicySpec {self.name!r}: target must be 'module:Class', got {self.target!r}")
        unknown = [kind for kind in self.action_spaces if kind not in ACTION_SPACES]
        if unknown or not self.action_spaces:
            raise ConfigError(
                f"PolicySpec {self.name!r}: action_spaces must be some of {ACTION_SPACES}, got {self.action_spaces!r}"
            )

    @property
    def typed(self) -> Optional[Type[Section]]:
        """The algorithm's typed section, None for one registered with a defaults function only."""
        return self.section if isinstance(self.section, type) and issubclass(self.section, Section) else None

    def defaults(self) -> EasyDict:
        """The ``policy`` section's defaults, a fresh tree each call."""
        return self.typed.defaults() if self.typed else EasyDict(self.section())

    def read(self, cfg: Mapping[str, Any]) -> Any:
        """The ``policy`` section of the compiled config ``cfg`` as a frozen instance of the algorithm's section
        (:meth:`~parallel_rl.config.section.Section.read`: ``.learn.batch_size``); an algorithm registered with a
        defaults function only has no section, and gets the tree's ``policy`` (read by attribute the same)."""
        return self.typed.read(cfg) if self.typed else cfg["policy"]

    @property
    def flow(self) -> str:
        """The data flow its defaults ask for (``replay``, ``segments``, ``async``; parallel_rl.data.flows)."""
        from ..data.flows import flow_of

        return flow_of(self.defaults()).name


POLICIES: Dict[str, PolicySpec] = {}


def register_policy(
    spec: Union[PolicySpec, str],
    target: Optional[str] = None,
    default_config: Optional[Callable[[], Mapping]] = None,
    action_spaces: Tuple[str, ...] = ("discrete",),
) -> PolicySpec:
    """Register an algorithm (a :class:`PolicySpec`; the seed form ``register_policy(name, "module:Class",
    default_config, action_spaces)`` builds one), replacing one of the same name."""
    if not isinstance(spec, PolicySpec):
        if target is None or default_config is None:
            raise ConfigError(
                f"register_policy({spec!r}, ...) needs a PolicySpec, or a name, a 'module:Class' "
                f"target and a default_config function"
            )
        spec = PolicySpec(spec, target, default_config, tuple(action_spaces))
    POLICIES[spec.name] = spec
    return spec


def policy_spec(name: Any) -> PolicySpec:
    """The spec of ``policy.type`` ``name``; ConfigError with the closest known name otherwise."""
    if name not in POLICIES:
        close = difflib.get_close_matches(str(name), list(POLICIES), n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        raise ConfigError(f"unknown policy.type {name!r}{hint} (known: {', '.join(sorted(POLICIES))})")
    return POLICIES[name]


class _SpecView(Mapping):
    """A read-only mapping over the registry: the seed names ``POLICY_DEFAULTS`` (name -> defaults function) and
    ``POLICY_ACTION_SPACES`` (name -> action spaces)."""

    def __init__(self, pick: Callable[[PolicySpec], Any]):
        self._pick = pick

    def __getitem__(self, name: str) -> Any:
        return self._pick(POLICIES[name])

    def __iter__(self) -> Iterator[str]:
        return iter(POLICIES)

    def __len__(self) -> int:
        return len(POLICIES)


POLICY_DEFAULTS: Mapping[str, Callable[[], EasyDict]] = _SpecView(lambda spec: spec.defaults)
POLICY_ACTION_SPACES: Mapping[str, Tuple[str, ...]] = _SpecView(lambda spec: spec.action_spaces)

for _spec in (
    PolicySpec("dqn", "parallel_rl.policy.dqn:DQNPolicy", DQNSection),
    PolicySpec("r2d2", "parallel_rl.policy.r2d2:R2D2Policy", R2D2Section),
    PolicySpec("ppo", "parallel_rl.policy.ppo:PPOPolicy", PPOSection, ("discrete", "box")),
    PolicySpec("sac", "parallel_rl.policy.sac:SACPolicy", SACSection, ("box",)),
    PolicySpec("td3", "parallel_rl.policy.td3:TD3Policy", TD3Section, ("box",)),
    PolicySpec("impala", "parallel_rl.policy.impala:IMPALAPolicy", ImpalaSection, ("discrete", "box")),
    PolicySpec("appo", "parallel_rl.policy.appo:APPOPolicy", APPOSection, ("discrete", "box")),
):
    register_policy(_spec)
