"""DI-engine's comm interfaces (:class:`BaseCommCollector`, :class:`BaseCommLearner`) and the registries their
implementations join. The roles' shells (:mod:`parallel_rl.collector.shell`, :mod:`parallel_rl.learner.shell`)
implement them; the factories in :mod:`parallel_rl.compat.comm` build them, so the dependency points one way:
compat.comm -> shells -> slave.comm.
"""

from __future__ import annotations

import abc
from typing import Any, Callable, List, Optional

from ..registry import Registry

COMM_COLLECTOR_REGISTRY = Registry("comm_collector")
COMM_LEARNER_REGISTRY = Registry("comm_learner")


class BaseCommCollector(abc.ABC):
    """A collector's link to the coordinator and the shared store (DI-engine's interface)."""

    def __init__(self, cfg: Any) -> None:
        """What DI-engine's base keeps for a subclass written against it (``self._cfg``: its comm config;
        ``self._end_flag``: True until started). Our slaves build themselves from keywords (Slave) instead."""
        self._cfg = cfg
        self._end_flag = True

    @abc.abstractmethod
    def get_policy_update_info(self, path: Optional[str] = None) -> Any:
        """What tells the collector a newer policy is out (ours: the newest version on the shared disk)."""

    @abc.abstractmethod
    def send_metadata(self, metadata: dict) -> None:
        """Queue one small control message for the coordinator."""

    @abc.abstractmethod
    def send_stepdata(self, stepdata: Any, *args: Any) -> Any:
        """Put step data on the shared store (DI-engine's abstract signature; ``FlaskFileSystemCollector``'s is
        ``send_stepdata(path, stepdata) -> path``)."""

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

    def __init__(self, cfg: Any) -> None:
        """What DI-engine's base keeps for a subclass written against it (``self._cfg``: its comm config;
        ``self._end_flag``: True until started). Our slaves build themselves from keywords (Slave) instead."""
        self._cfg = cfg
        self._end_flag = True

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
