"""The launcher's own section of the run config, ``parallel.supervisor``, with its defaults: how ``parallel-rl run``
(:mod:`.launcher`) restarts the children that die. A module of its own: the launcher's imports reach the config
package (through the REST app), whose assembly imports this."""
from __future__ import annotations

from easydict import EasyDict


def supervisor_default_config() -> EasyDict:
    """The ``parallel.supervisor`` section: how many times, and how soon, a dead child is restarted."""
    return EasyDict(
        # `parallel-rl run` restarts a child that dies, at most this many times per role (learner,
        # collector); one more death of that role fails the run
        max_restarts=5,
        # the first restart of a role is immediate (a one-off death costs no wait); the second waits this
        # many seconds, doubled for each further one, up to max_backoff
        backoff=0.25,
        max_backoff=10.0,
    )
