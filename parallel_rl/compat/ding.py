"""DI-engine's names for our cluster classes (``ding.worker``): the same classes under the names DI-engine
users know. Our own code uses the descriptive names; importable from here and from ``parallel_rl.worker``.

| DI-engine                    | parallel_rl                                             |
|------------------------------|---------------------------------------------------------|
| ``ZerglingParallelCollector``| :class:`parallel_rl.collector.cluster.ClusterCollector` |
| ``MarineParallelCollector``  | :class:`parallel_rl.collector.cluster_battle.BattleClusterCollector` |
| ``FlaskFileSystemCollector`` | :class:`parallel_rl.collector.shell.CollectorSlave`     |
| ``FlaskFileSystemLearner``   | :class:`parallel_rl.learner.shell.LearnerSlave`         |
"""
from ..collector.cluster import ClusterCollector as ZerglingParallelCollector
from ..collector.cluster_battle import BattleClusterCollector as MarineParallelCollector
from ..collector.shell import CollectorSlave as FlaskFileSystemCollector
from ..learner.aggregator import LearnerAggregator
from ..learner.shell import LearnerSlave as FlaskFileSystemLearner

__all__ = ["FlaskFileSystemCollector", "FlaskFileSystemLearner", "LearnerAggregator", "MarineParallelCollector",
           "ZerglingParallelCollector"]
