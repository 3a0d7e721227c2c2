"""ZerglingParallelCollector: the collector's logic in the cluster (no HTTP).

One policy over many envs with batched inference (the serial collector's
machinery), chunks of transitions written to the shared disk, each stamped
with the policy version that produced it, and greedy evaluation episodes on
a separate env set. The process shell is
:class:`parallel_rl.interaction.collector_worker.FlaskFileSystemCollector`.
"""
from __future__ import annotations

import logging
import time
from typing import Any, Dict, Optional, Tuple

import numpy as np
from easydict import EasyDict

from ..envs.env_manager import EnvManager
from ..policy import create_policy
from ..storage import SharedStorage
from .collector import CollectStats, SampleSerialCollector
from .evaluator import InteractionSerialEvaluator
from .parallel_collector import BaseParallelCollector

logger = logging.getLogger(__name__)

# a directory mtime this old cannot change without changing its value (far above timestamp ticks)
_SETTLED_NS = 50_000_000


class ZerglingParallelCollector(BaseParallelCollector):
    def __init__(self, cfg: EasyDict, storage: SharedStorage, seed: int = 0):
        self.cfg = cfg
        self.storage = storage
        self._build(seed)
        self.policy_version = -1
        self._policy_dir_stamp: Optional[int] = None
        self._seed = seed
        self._eval_policy = None
        self._evaluator: Optional[InteractionSerialEvaluator] = None

    def _build(self, seed: int) -> None:
        """The envs, the (CPU) policy and the serial collector this collector drives."""
        cfg = self.cfg
        self.env = EnvManager.from_cfg(cfg.env, cfg.env.collector_env_num, seed=seed)
        self.policy = create_policy(cfg.policy, self.env.obs_dim, self.env.action_spec, seed=seed, device="cpu")
        self.collector = SampleSerialCollector(cfg.policy.collect.collector, self.env, self.policy.collect_mode,
                                               nstep=cfg.policy.nstep, discount_factor=cfg.policy.discount_factor)

    @property
    def envstep(self) -> int:
        return self.collector.envstep

    def get_policy_update_info(self) -> Optional[int]:
        """The newest policy version on the shared disk, if newer than ours.

        One ``stat`` of the policy directory while nothing changed there: cheap enough to ask after
        every batch of steps. The directory is listed again while its mtime is recent (two changes
        within one timestamp tick share an mtime). A directory whose changes show late, as on NFS with
        attribute caching, only delays this: the coordinator's control block announces policies too."""
        stamp = self.storage.policy_dir_stamp()
        if stamp == self._policy_dir_stamp and time.time_ns() - stamp > _SETTLED_NS:
            return None
        self._policy_dir_stamp = stamp
        latest = self.storage.latest_policy_version()
        return latest if latest is not None and latest > self.policy_version else None

    def update_policy(self, version: int) -> bool:
        """Load checkpoint ``version``; False if it is gone (pruned) or not newer."""
        if version <= self.policy_version:
            return False
        try:
            state = self.storage.load_policy(version)
        except FileNotFoundError:
            return False
        self.policy.load_model_state_dict(state)
        self.policy_version = version
        return True

    def collect(self, n_sample: int, eps: float, random_collect: bool = False) -> Tuple[Dict[str, np.ndarray], CollectStats]:
        """``n_sample`` rows; on-policy up to ``num_envs - 1`` more, so every row of a call comes from the
        policy loaded now (the surplus is not kept for a call that may act with a newer policy)."""
        data = self.collector.collect(n_sample, train_iter=self.policy_version, policy_kwargs={"eps": eps},
                                      drop_extra=not self.policy.on_policy, random_collect=random_collect)
        return data, self.collector.last_stats

    def send_stepdata(self, name: str, data: Dict[str, np.ndarray]) -> str:
        """Write a chunk atomically to the shared disk; returns its path."""
        return self.storage.write_chunk(name, data)

    def evaluate(self, version: int, n_episode: int) -> Dict[str, Any]:
        """Greedy episodes with checkpoint ``version`` (not the collecting policy)."""
        if self._evaluator is None:
            env = EnvManager.from_cfg(self.cfg.env, self.cfg.env.evaluator_env_num, seed=self._seed + 10_000)
            self._eval_policy = create_policy(self.cfg.policy, env.obs_dim, env.action_spec, seed=self._seed, device="cpu")
            self._evaluator = InteractionSerialEvaluator(
                self.cfg.policy.eval.evaluator, env, self._eval_policy.eval_mode, self.cfg.env.stop_value,
                self.cfg.env.n_evaluator_episode, seed=self._seed + 20_000)
        version, state = self._load_for_eval(version)
        self._eval_policy.load_model_state_dict(state)
        _, info = self._evaluator.eval(n_episode=max(n_episode, self._evaluator.env.num_envs))
        info["policy_version"] = version
        return info

    def _load_for_eval(self, version: int) -> Tuple[int, Dict]:
        """(version, state) of checkpoint ``version``, or of the newest one if it was pruned meanwhile."""
        try:
            return version, self.storage.load_policy(version)
        except FileNotFoundError:
            latest = self.storage.latest_policy_version()
            if latest is None or latest < version:
                raise
            return latest, self.storage.load_policy(latest)

    def close(self) -> None:
        self.collector.close()
        if self._evaluator is not None:
            self._evaluator.close()
