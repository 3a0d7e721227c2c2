"""The entry points' sections: the launcher's own section of the run config, ``parallel.supervisor`` (how
``parallel-rl run``, :mod:`.launcher`, restarts the children that die), and the serial commander's (DI-engine's
``BaseSerialCommander``, :mod:`.commander`). A module of its own: the launcher's imports reach the config package
(through the REST app), whose assembly imports this."""

from __future__ import annotations

import dataclasses
from typing import Any, ClassVar, Mapping, Optional

from easydict import EasyDict

from ..config.section import Section, setting
from ..errors import ConfigError


@dataclasses.dataclass(frozen=True)
class SupervisorSection(Section):
    """How many times, and how soon, ``parallel-rl run`` restarts a dead child."""

    path = "parallel.supervisor"
    title = "The launcher's supervisor (parallel-rl run)"

    max_restarts: int = setting(
        5,
        lo=0,
        doc="""`parallel-rl run` restarts a child that dies, at most this many times
        per role (learner, collector) within restart_window seconds; one more death of that role in the window fails
        the run. A collector removed on purpose (DELETE, `collectors remove`) is no death: it is not replaced""",
    )
    restart_window: float = setting(
        600.0,
        lo=0,
        doc="""restarts older than this many seconds no longer count, as task
        failures in parallel.commander.task_failure_window (six OOM kills over a week are no crash loop); 0: the
        whole run""",
    )
    backoff: float = setting(
        0.25,
        lo=0,
        doc="""a role's first restart in the window is immediate (a one-off death
        costs no wait); the second waits this many seconds, doubled for each further one, up to max_backoff; once
        the window holds no restart of the role (a healthy stretch), the next one is immediate again""",
    )
    max_backoff: float = setting(10.0, lo=0, doc="the longest wait before a restart")

    @classmethod
    def check_relations(cls, values: Mapping[str, Any], path: str) -> None:
        if values["max_backoff"] < values["backoff"]:
            raise ConfigError(
                f"{path} needs backoff <= max_backoff, got {path}.backoff={values['backoff']!r}, "
                f"{path}.max_backoff={values['max_backoff']!r}"
            )


def supervisor_default_config() -> EasyDict:
    """The ``parallel.supervisor`` section's defaults (the seed name)."""
    return SupervisorSection.defaults()


@dataclasses.dataclass(frozen=True)
class SerialCommanderSection(Section):
    """DI-engine's ``BaseSerialCommander(cfg, ...)`` section (DI-engine passes ``policy.other.commander``, empty by
    default). It has no settings: the exploration schedule the commander applies is the policy's
    (``policy.other.eps``), so a key here would do nothing and is refused (DI-engine's ``cfg_type`` label aside)."""

    path = "policy.other.commander"
    title = "The serial commander (DI-engine's BaseSerialCommander)"

    # the label DI-engine's default_config() adds to every section it makes: carried, never read
    LABEL: ClassVar[str] = "cfg_type"

    @classmethod
    def load(cls, cfg: Optional[Mapping[str, Any]]) -> EasyDict:
        """The section's defaults with ``cfg`` over them, checked; a key it does not have is a ConfigError."""
        values = cls.defaults()
        for key, value in (cfg or {}).items():
            if key not in values and key != cls.LABEL:
                keys = ", ".join(repr(k) for k in values) or "none"
                raise ConfigError(
                    f"unknown config key {cls.path}.{key} (BaseSerialCommander's keys: {keys}; the epsilon schedule "
                    f"is the policy's, policy.other.eps): remove it"
                )
            values[key] = value
        cls.check(values)
        return values
