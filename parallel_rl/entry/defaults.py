"""The launcher's own section of the run config, ``parallel.supervisor``: how ``parallel-rl run`` (:mod:`.launcher`)
restarts the children that die. A module of its own: the launcher's imports reach the config package (through the
REST app), whose assembly imports this."""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping

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
