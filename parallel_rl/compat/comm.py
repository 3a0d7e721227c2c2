"""DI-engine's comm interfaces and factories for the cluster's slaves.

:class:`BaseCommCollector` / :class:`BaseCommLearner` are the interfaces our
HTTP + shared-filesystem slaves (:class:`CollectorSlave`,
:class:`LearnerSlave`) implement; :func:`create_comm_collector` /
:func:`create_comm_learner` build one from a config by its ``type``, after
importing the config's ``import_names`` (where your own registered classes
live). :class:`NaiveCollector` is the smallest collector slave: it relays
each task it is given back to the coordinator as done, with its spec as the
result (a minimal worker for tests and docs).
"""

from __future__ import annotations

import logging
from typing import Any, Dict, List, Mapping, Optional

from easydict import EasyDict

from ..registry import Registry, import_modules
from ..transport import ApiError
from ..slave.comm import (
    COMM_COLLECTOR_REGISTRY,
    COMM_LEARNER_REGISTRY,
    BaseCommCollector,
    BaseCommLearner,
    register_comm_collector,
    register_comm_learner,
)
from ..slave.slave import Slave, SlaveTask

__all__ = [
    "COMM_COLLECTOR_REGISTRY",
    "COMM_LEARNER_REGISTRY",
    "BaseCommCollector",
    "BaseCommLearner",
    "NaiveCollector",
    "create_comm_collector",
    "create_comm_learner",
    "register_comm_collector",
    "register_comm_learner",
]

logger = logging.getLogger(__name__)


def _build(registry: Registry, cfg: Mapping) -> Any:
    # they register "flask_fs"; imported on first use, because they import torch and the algorithms, which
    # the base classes and NaiveCollector need not
    from ..collector import shell as _collector  # noqa: F401
    from ..learner import shell as _learner  # noqa: F401

    cfg = EasyDict(dict(cfg))
    import_modules(cfg.pop("import_names", []) or [], "comm import_names")
    kind = cfg.pop("type", "flask_fs")
    return registry.build(kind, **cfg)


def create_comm_collector(cfg: Mapping) -> BaseCommCollector:
    """Build the comm collector named by ``cfg.type`` (``flask_fs``, ``naive`` or yours).

    ``cfg.import_names`` are imported first (modules that register classes);
    the other keys are the class's keyword arguments, e.g. ``coordinator_url``,
    ``host``, ``port``, ``token``, ``shared_dir``, ``max_tasks``.
    """
    return _build(COMM_COLLECTOR_REGISTRY, cfg)


def create_comm_learner(cfg: Mapping) -> BaseCommLearner:
    """Build the comm learner named by ``cfg.type`` (``flask_fs`` or yours); as :func:`create_comm_collector`."""
    return _build(COMM_LEARNER_REGISTRY, cfg)


class NaiveCollector(Slave, BaseCommCollector):
    """A collector slave that does no work: each collector task is reported done with its spec as the result.

    ``relayed`` lists the tasks it handled (task id, spec).
    """

    kind = "collector"

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.relayed: List[Dict[str, Any]] = []

    def validate_task(self, task: SlaveTask) -> None:
        if task.kind != "collector":
            raise ApiError(400, "bad_request", f"NaiveCollector relays collector tasks only, not {task.kind!r}")

    def execute(self, task: SlaveTask) -> Dict[str, Any]:
        logger.info("naive collector %s: relaying %s %s", self.worker_id, task.task_id, task.spec)
        self.relayed.append({"task_id": task.task_id, "spec": dict(task.spec)})
        return {"relayed": dict(task.spec), "completed": True}

    def get_policy_update_info(self, path: Optional[str] = None) -> Any:
        return None

    def send_stepdata(self, *args: Any) -> Any:
        raise NotImplementedError("NaiveCollector writes no step data; use CollectorSlave")

    @property
    def collector_uid(self) -> Optional[str]:
        return self.worker_id


COMM_COLLECTOR_REGISTRY.register("naive", NaiveCollector)
