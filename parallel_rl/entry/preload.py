"""What ``parallel-rl run``'s fork server imports before it forks workers (see :mod:`.forkserver`).

Everything a learner or a collector imports on its way to its first task, so a worker forked from the fork
server starts with it all in memory. Imports only: nothing here may start a thread or build torch's thread
pools (a fork copies neither safely); workers set their torch threads themselves. A module that fails to
import is logged and skipped: its workers import it themselves, later and slower.
"""

import atexit
import gc
import importlib
import logging

from .forkserver import leave_fork_server, become_fork_server

logger = logging.getLogger(__name__)
become_fork_server()  # before the imports: signals, and dying with the launcher, from the start

# besides the roles' classes (parallel_rl.entry.roles.slave_class): what a worker imports when it connects
MODULES = (
    "numpy",
    "torch",
    "gymnasium",
    "parallel_rl.collector.serial",
    "parallel_rl.learner.learner",
    "parallel_rl.config.assembly",  # every component's defaults: a worker compiles the config it is sent
    "parallel_rl.policy.dqn",
    "parallel_rl.policy.ppo",
    "parallel_rl.policy.sac",
    "parallel_rl.policy.td3",
)


def _preload() -> None:
    from ..tblog import writer_class
    from .roles import slave_class

    # TensorBoard's writer through tblog, which keeps the AWS SDK out of it (tensorboard.summary would import it)
    imports = (
        [(name, importlib.import_module) for name in MODULES]
        + [("tensorboard.summary", lambda _: writer_class())]
        + [(role, slave_class) for role in ("learner", "collector")]
    )
    for name, load in imports:
        try:
            load(name)
        except ImportError as exc:
            logger.warning("fork server: could not preload %s (%s); workers import it when they need it", name, exc)


_preload()

# what the imports made is shared by every worker: out of the garbage collector's way (a worker's full collection
# would walk it all and write to every page it is on, copying them): Python's advice for fork without exec
gc.freeze()

# the fork server exits when the launcher does (multiprocessing raises SystemExit in it, or the stop signal comes); leave
# without the interpreter's teardown, as the CLI does (0.4-1.1 s once torch is imported, seconds on a busy box,
# and it holds the launcher's stdout open until then). Registered last, so it runs first; workers never run it
# (they leave through os._exit)
atexit.register(leave_fork_server)
