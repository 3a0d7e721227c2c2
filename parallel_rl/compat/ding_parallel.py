"""DI-engine's slave callbacks (``deal_with_*``) on our collector, learner and aggregator slaves.

DI-engine's comm classes are driven by its ``Slave`` HTTP shell calling ``deal_with_*``; ours by the coordinator's
task assignments (``Slave.assign``), the worker loop and the outbox. Each callback here is a thin adapter: it does
through our slave what DI-engine's does through its own.

==================================  ================================================================================
DI-engine                           here
==================================  ================================================================================
``deal_with_resource()``            ``{"cpu": cores this process may use, "gpu": CUDA devices}``
``deal_with_collector_start(task)`` ``assign``: the task (``task_id`` and its spec, e.g. ``env_steps``) is queued
                                    and the worker loop runs it, as a task the coordinator assigns
``deal_with_collector_data()``      the next metadata message the collector sent (waits for one), as DI-engine's
                                    metadata queue hands it; a copy: the outbox still delivers it
``deal_with_collector_close()``     asks the running tasks to wrap up; the collector's ``get_finish_info()``
``deal_with_learner_start(task)``   ``assign`` of a learner task
``deal_with_learner_close()``       asks the running task to wrap up (it publishes its last policy)
``deal_with_get_resource()``        the aggregator's resources, and its ranks (``rank_list()``)
==================================  ================================================================================
"""

from __future__ import annotations

import collections
import logging
import os
import threading
from typing import Any, Deque, Dict, Mapping, Tuple

from ..collector.shell import CollectorSlave
from ..learner.aggregator import LearnerAggregator as _Aggregator
from ..learner.shell import LearnerSlave
from ..slave.mail import SlaveTask

logger = logging.getLogger(__name__)

# metadata messages a FlaskFileSystemCollector keeps for deal_with_collector_data (the oldest go first)
KEPT_METADATA = 1000


def resources() -> Dict[str, int]:
    """What DI-engine's ``deal_with_resource`` reports: CPU cores this process may use and CUDA devices."""
    import torch

    return {"cpu": len(os.sched_getaffinity(0)), "gpu": torch.cuda.device_count()}


def slave_arguments(cfg: Any, args: tuple, kwargs: dict) -> Tuple[tuple, dict]:
    """DI-engine builds a comm class from its cfg (``FlaskFileSystemCollector(cfg)``): the cfg's keys (less
    ``type`` / ``import_names``, which pick and import the class) are the slave's keywords (``host``, ``port``,
    ``coordinator_url``, ``token``, ``shared_dir``, ...). Anything else as cfg is the slave's first argument
    (``coordinator_url``), as before."""
    if isinstance(cfg, Mapping):
        return args, {**{k: v for k, v in cfg.items() if k not in ("type", "import_names")}, **kwargs}
    return ((cfg, *args) if cfg is not None else args), kwargs


def task_from_info(task_info: Dict[str, Any], kind: str) -> SlaveTask:
    """A DI-engine ``task_info`` dict: its ``task_id`` and the rest as the spec (or its ``spec``, when given)."""
    if "task_id" not in task_info:
        raise ValueError(f"task_info needs a task_id, got keys {sorted(task_info)}")
    spec = task_info.get("spec", {k: v for k, v in task_info.items() if k != "task_id"})
    return SlaveTask(str(task_info["task_id"]), kind, dict(spec))


class FlaskFileSystemCollector(CollectorSlave):
    """:class:`CollectorSlave` with DI-engine's ``deal_with_*`` callbacks."""

    def __init__(self, cfg: Any = None, *args: Any, **kwargs: Any):
        args, kwargs = slave_arguments(cfg, args, kwargs)
        super().__init__(*args, **kwargs)
        self._metadata: Deque[dict] = collections.deque(maxlen=KEPT_METADATA)
        self._metadata_ready = threading.Condition()

    def send_metadata(self, metadata: dict, urgent: bool = False) -> None:
        super().send_metadata(metadata, urgent=urgent)
        with self._metadata_ready:
            self._metadata.append(dict(metadata))
            self._metadata_ready.notify_all()

    def deal_with_resource(self) -> Dict[str, int]:
        return resources()

    def deal_with_collector_start(self, task_info: dict) -> None:
        self.assign(task_from_info(task_info, "collector"))

    def deal_with_collector_data(self) -> dict:
        with self._metadata_ready:
            self._metadata_ready.wait_for(lambda: self._metadata)
            return self._metadata.popleft()

    def deal_with_collector_close(self) -> dict:
        for task in self._stop_running_tasks():
            logger.info("collector %s: closing, task %s wraps up", self.worker_id, task.task_id)
        return self.collector.get_finish_info() if self.collector is not None else {}


class FlaskFileSystemLearner(LearnerSlave):
    """:class:`LearnerSlave` with DI-engine's ``deal_with_*`` callbacks."""

    def __init__(self, cfg: Any = None, *args: Any, **kwargs: Any):
        args, kwargs = slave_arguments(cfg, args, kwargs)
        super().__init__(*args, **kwargs)

    def deal_with_resource(self) -> Dict[str, int]:
        return resources()

    def deal_with_learner_start(self, task_info: dict) -> None:
        self.assign(task_from_info(task_info, "learner"))

    def deal_with_learner_close(self) -> None:
        self._stop_running_tasks()


class LearnerAggregator(_Aggregator):
    """The learner aggregator with DI-engine's ``deal_with_*`` callbacks."""

    def __init__(self, cfg: Any = None, *args: Any, **kwargs: Any):
        args, kwargs = slave_arguments(cfg, args, kwargs)
        super().__init__(*args, **kwargs)

    def deal_with_get_resource(self) -> Dict[str, Any]:
        return {**resources(), "world_size": self.world_size, "ranks": self.rank_list()}

    def deal_with_learner_start(self, task: dict) -> None:
        self.assign(task_from_info(task, "learner"))
