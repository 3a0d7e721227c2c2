"""The launcher's own section of the run config, ``parallel.supervisor``, with its defaults: how ``parallel-rl run``
(:mod:`.launcher`) restarts the children that die. A module of its own: the launcher's imports reach the config
package (through the REST app), whose assembly imports this."""
from __future__ import annotations

from easydict import EasyDict


def supervisor_default_config() -> EasyDict:
    """The ``parallel.supervisor`` section: how many times, and how soon, a dead child is restarted."""
    return EasyDict(
        # `parallel-rl run` restarts a child that dies, at most this many times per role (learner,
        # collector) within restart_window seconds; one more death of that role in the window fails the run.
        # A collector removed on purpose (DELETE, `collectors remove`) is no death: it is not replaced
        max_restarts=5,
        # restarts older than this many seconds no longer count, as task failures in
        # parallel.commander.task_failure_window (six OOM kills over a week are no crash loop); 0: the whole run
        restart_window=600.0,
        # a role's first restart in the window is immediate (a one-off death costs no wait); the second waits
        # this many seconds, doubled for each further one, up to max_backoff; once the window holds no restart
        # of the role (a healthy stretch), the next one is immediate again
        backoff=0.25,
        max_backoff=10.0,
    )
