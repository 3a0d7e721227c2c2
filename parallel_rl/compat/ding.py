"""DI-engine's names for our cluster classes (``ding.worker``): the same classes under the names DI-engine
users know. Our own code uses the descriptive names; importable from here and from ``parallel_rl.worker``.

| DI-engine                    | parallel_rl                                             |
|------------------------------|---------------------------------------------------------|
| ``ZerglingParallelCollector``| :class:`parallel_rl.collector.cluster.ClusterCollector` |
| ``MarineParallelCollector``  | :class:`parallel_rl.collector.cluster_battle.BattleClusterCollector` |
| ``FlaskFileSystemCollector`` | :class:`parallel_rl.collector.shell.CollectorSlave`, with DI-engine's ``deal_with_*`` (:mod:`.ding_parallel`) |
| ``FlaskFileSystemLearner``   | :class:`parallel_rl.learner.shell.LearnerSlave`, the same |
| ``LearnerAggregator``        | :class:`parallel_rl.learner.aggregator.LearnerAggregator`, the same |
| ``Coordinator``              | :class:`parallel_rl.coordinator.Coordinator`, with DI-engine's ``deal_with_*`` and ``default_config`` (:mod:`.ding_coordinator`) |
"""

from ..collector.cluster import ClusterCollector as ZerglingParallelCollector
from ..collector.cluster_battle import BattleClusterCollector as MarineParallelCollector
from .ding_coordinator import Coordinator
from .ding_parallel import FlaskFileSystemCollector, FlaskFileSystemLearner, LearnerAggregator

__all__ = [
    "Coordinator",
    "FlaskFileSystemCollector",
    "FlaskFileSystemLearner",
    "LearnerAggregator",
    "MarineParallelCollector",
    "ZerglingParallelCollector",
]
