"""DI-engine's comm interfaces and factories for the cluster's slaves.

:class:`BaseCommCollector` / :class:`BaseCommLearner` are the interfaces our
HTTP + shared-filesystem slaves (:class:`FlaskFileSystemCollector`,
:class:`FlaskFileSystemLearner`) implement; :func:`create_comm_collector` /
:func:`create_comm_learner` build one from a config by its ``type``, after
importing the config's ``import_names`` (where your own registered classes
live). :class:`NaiveCollector` is the smallest collector slave: it relays
each task it is given back to the coordinator as done, with its spec as the
result (a minimal worker for tests and docs).
"""
from __future__ import annotations

import abc
import logging
from typing import Any, Callable, Dict, List, Mapping, Optional

from easydict import EasyDict

from ..registry import Registry, import_modules
from ..transport import ApiError
from .slave import Slave, SlaveTask

logger = logging.getLogger(__name__)

COMM_COLLECTOR_REGISTRY = Registry("comm_collector")
COMM_LEARNER_REGISTRY = Registry("comm_learner")


class BaseCommCollector(abc.ABC):
    """A collector's link to the coordinator and the shared store (DI-engine's interface)."""

    @abc.abstractmethod
    def get_policy_update_info(self, path: Optional[str] = None) -> Any:
        """What tells the collector a newer policy is out (ours: the newest version on the shared disk)."""

    @abc.abstractmethod
    def send_metadata(self, metadata: dict) -> None:
        """Queue one small control message for the coordinator."""

    @abc.abstractmethod
    def send_stepdata(self, *args: Any) -> Any:
        """Put step data on the shared store (ours: ``send_stepdata(name, columns) -> path``)."""

    @abc.abstractmethod
    def start(self) -> Any: ...

    @abc.abstractmethod
    def close(self) -> None: ...

    @property
    @abc.abstractmethod
    def collector_uid(self) -> Optional[str]:
        """The id the coordinator gave this collector (None until connected)."""


class BaseCommLearner(abc.ABC):
    """A learner's link to the coordinator and the shared store (DI-engine's interface)."""

    @abc.abstractmethod
    def send_policy(self, *args: Any, **kwargs: Any) -> None:
        """Publish a policy checkpoint (ours: ``send_policy(policy, train_iter, final=False)``)."""

    @abc.abstractmethod
    def get_data(self, *args: Any, **kwargs: Any) -> Any:
        """The next training batch (ours: ``get_data(pipeline, timeout)``)."""

    @abc.abstractmethod
    def send_learn_info(self, *args: Any, **kwargs: Any) -> None:
        """Report training statistics to the coordinator."""

    @abc.abstractmethod
    def start(self) -> Any: ...

    @abc.abstractmethod
    def close(self) -> None: ...

    @property
    def hooks4call(self) -> List[Any]:
        """Learner hooks the comm learner wants called. Ours: none; its task loop publishes policies
        (``parallel.learner.publish_every``) and learn info itself."""
        return []


def register_comm_collector(name: str, cls: Any = None) -> Callable:
    """Register a comm collector class under ``name`` (usable as a decorator)."""
    return COMM_COLLECTOR_REGISTRY.register(name, cls)


def register_comm_learner(name: str, cls: Any = None) -> Callable:
    """Register a comm learner class under ``name`` (usable as a decorator)."""
    return COMM_LEARNER_REGISTRY.register(name, cls)


def _build(registry: Registry, cfg: Mapping) -> Any:
    from . import collector_worker, learner_worker  # noqa: F401  (they register "flask_fs")

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
        raise NotImplementedError("NaiveCollector writes no step data; use FlaskFileSystemCollector")

    @property
    def collector_uid(self) -> Optional[str]:
        return self.worker_id


COMM_COLLECTOR_REGISTRY.register("naive", NaiveCollector)
