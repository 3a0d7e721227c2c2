"""The cluster collector a run's config asks for (DI-engine's ``create_parallel_collector``)."""

from __future__ import annotations

from typing import Optional, Union

from easydict import EasyDict

from ..envs.multiagent import is_battle_env
from ..storage import SharedStorage
from .cluster import ClusterCollector
from .cluster_battle import BattleClusterCollector


def create_parallel_collector(
    cfg: EasyDict, storage: Optional[SharedStorage] = None, seed: int = 0
) -> Union[ClusterCollector, BattleClusterCollector]:
    """A :class:`BattleClusterCollector` (DI-engine's ``MarineParallelCollector``) for a two-player game, the
    training player against each task's opponent; else a :class:`ClusterCollector` (``ZerglingParallelCollector``).
    ``storage``: None for the run's shared store."""
    if is_battle_env(cfg.env):
        return BattleClusterCollector(cfg, storage, seed=seed)
    return ClusterCollector(cfg, storage, seed=seed)
