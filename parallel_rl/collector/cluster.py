"""ClusterCollector: the collector's logic in the cluster (no HTTP).

One policy over many envs with batched inference (the serial collector's
machinery), chunks of transitions written to the shared disk, each stamped
with the policy version that produced it, and greedy evaluation episodes on
a separate env set. The process shell is
:class:`parallel_rl.collector.shell.CollectorSlave`.
"""

from __future__ import annotations

import logging
from typing import Any, Dict, Optional, Set, Tuple

import numpy as np
from easydict import EasyDict

from ..data.frames import FramePacker
from ..envs.env_manager import EnvManager
from ..errors import ConfigError, StorageError, StorageFaultError
from ..policy import create_policy
from ..storage import SharedStorage
from .serial import CollectStats, SampleSerialCollector
from ..evaluator.serial import InteractionSerialEvaluator
from .base import BaseParallelCollector

logger = logging.getLogger(__name__)


class ClusterCollector(BaseParallelCollector):
    def __init__(self, cfg: EasyDict, storage: Optional[SharedStorage] = None, seed: int = 0):
        """``storage``: where chunks go and policies come from (None: the run's shared store, as the slave opens
        it from ``parallel.shared_dir`` or ``<exp_name>/shared``)."""
        from ..runtime import run_storage

        super().__init__(cfg)
        self.storage = storage if storage is not None else run_storage(cfg)
        self._build(seed)
        self.policy_version = -1
        self._policy_dir_stamp: Optional[int] = None
        self._seed = seed
        self._eval_policy = None
        self._evaluator: Optional[InteractionSerialEvaluator] = None
        # policy checkpoints found damaged (not loadable): logged once, never read again
        self.damaged_versions: Set[int] = set()
        # frame-stacked chunks refer to the frames of the chunk before them (parallel_rl.data.frames)
        self.frames = FramePacker()
        self._packed_version: Optional[int] = None

    def _build(self, seed: int) -> None:
        """The envs, the (CPU) policy and the serial collector this collector drives."""
        cfg = self.cfg
        self.env = EnvManager.from_cfg(cfg.env, cfg.env.collector_env_num, seed=seed)
        self.policy = create_policy(cfg.policy, self.env.obs_dim, self.env.action_spec, seed=seed, device="cpu")
        self.collector = SampleSerialCollector(
            cfg.policy.collect.collector,
            self.env,
            self.policy.collect_mode,
            nstep=cfg.policy.nstep,
            discount_factor=cfg.policy.discount_factor,
        )

    @property
    def envstep(self) -> int:
        return self.collector.envstep

    def _act_with_policy(self) -> None:
        if getattr(self, "collector", None) is not None:  # _build sets the policy before it builds the collector
            self.collector.reset_policy(self.policy.collect_mode)

    def _step_env(self) -> None:
        self.collector.reset_env(self.env)

    def get_finish_info(self) -> Dict[str, Any]:
        """The last collection under DI-engine's keys (``train_iter`` is the policy version that collected)."""
        stats = self.collector.last_stats
        returns = np.asarray(stats.returns, dtype=np.float64)
        return {
            "finished_task": True,
            "eval_flag": False,
            "step_count": stats.env_steps,
            "train_iter": self.policy_version,
            "real_episode_count": stats.episodes,
            "avg_time_per_step": stats.duration / max(stats.env_steps, 1),
            "avg_step_per_episode": float(np.mean(stats.lengths)) if stats.episodes else 0.0,
            "reward_mean": float(returns.mean()) if len(returns) else 0.0,
            "reward_std": float(returns.std()) if len(returns) else 0.0,
            "each_reward": returns.tolist(),
            "collector_done": False,
        }

    def phase_seconds(self) -> Dict[str, float]:
        """Wall seconds ever spent stepping the envs and in the policy's forward (a worker's time breakdown)."""
        return {"env_step": self.collector.env_seconds, "policy_forward": self.collector.policy_seconds}

    def get_policy_update_info(self) -> Optional[int]:
        """The newest policy version on the shared disk, if newer than ours.

        One ``stat`` of the policy directory while nothing changed there (on an object store one LIST request at
        most every 0.25 s, whose names serve when they changed): cheap enough to ask after every batch of steps.
        The directory is listed again while its mtime is recent (two changes within one timestamp tick share an
        mtime). A directory whose changes show late, as on NFS with attribute caching, only delays this: the
        coordinator's control block announces policies too."""
        self._policy_dir_stamp, versions = self.storage.policies.changed_versions(self._policy_dir_stamp)
        if versions is None:
            return None
        latest = max((v for v in versions if v not in self.damaged_versions), default=None)
        return latest if latest is not None and latest > self.policy_version else None

    def update_policy(self, version: int) -> bool:
        """Load checkpoint ``version`` or, when it is damaged, the newest loadable one before it that is newer than
        ours; False if none is (gone, pruned, damaged, or not newer)."""
        if version <= self.policy_version:
            return False
        try:
            found = self.newest_loadable(version, floor=self.policy_version)
        except FileNotFoundError:
            return False
        if found is None:
            return False
        version, state = found
        self.load_checkpoint(self.policy, version, state)
        self.policy_version = version
        return True

    def newest_loadable(self, newest: int, floor: int = -1) -> Optional[Tuple[int, Dict]]:
        """``(version, state)`` of checkpoint ``newest`` or, when it cannot be loaded (damaged: a crash mid-write
        on a disk without fsync, bit rot), of the newest loadable one above ``floor``; None when there is none.
        A damaged checkpoint is logged once (naming its file) and never read again; a fault of the store is
        raised (it says nothing about the file), and so is FileNotFoundError (``newest`` pruned meanwhile)."""
        version: Optional[int] = newest
        while version is not None:
            if version not in self.damaged_versions:
                try:
                    return version, self.storage.policies.load(version)
                except StorageFaultError:
                    raise
                except StorageError as exc:
                    self.damaged_versions.add(version)
                    logger.error(
                        "collector: policy checkpoint %d cannot be loaded; using the newest one before it "
                        "(this one is skipped from now on): %.500s",
                        version,
                        " ".join(str(exc).split()),
                    )
            older = [v for v in self.storage.policies.versions() if floor < v < version]
            version = older[-1] if older else None
        return None

    def load_checkpoint(self, policy, version: int, state: Dict) -> None:
        """Load a checkpoint's state into ``policy``; ConfigError naming the file when it does not fit the model
        (every checkpoint of the run would fail alike: the run fails, with this one line, instead of failing task
        after task)."""
        try:
            policy.load_model_state_dict(state)
        except (RuntimeError, KeyError, ValueError, TypeError) as exc:
            detail = " ".join(f"{type(exc).__name__}: {exc}".split())
            raise ConfigError(
                f"policy checkpoint {self.storage.policies.path(version)} does not fit this collector's "
                f"model ({detail[:300]}); the learner and the collectors must build the same model "
                f"from the same config (policy.model, env)"
            ) from None

    def collect(
        self, n_sample: int, eps: float, random_collect: bool = False
    ) -> Tuple[Dict[str, np.ndarray], CollectStats]:
        """``n_sample`` rows; on-policy up to ``num_envs - 1`` more, so every row of a call comes from the
        policy loaded now (the surplus is not kept for a call that may act with a newer policy)."""
        data = self.collector.collect(
            n_sample,
            train_iter=self.policy_version,
            policy_kwargs={"eps": eps},
            drop_extra=self.policy.flow.drop_extra,
            random_collect=random_collect,
            keep_extra=True,
        )
        return data, self.collector.last_stats

    def send_stepdata(self, name: str, data: Dict[str, np.ndarray]) -> str:
        """Write a chunk atomically to the shared disk; returns its path. Frame stacks are packed, each frame once
        across this collector's consecutive chunks (:class:`~parallel_rl.data.frames.FramePacker`): a chunk
        refers to the chunk before it for the frames they share. On-policy, not across policy versions: a
        version's rows leave the replay once trained on, and the next version's chunks must not wait for them."""
        if not self.env.frame_stack:
            return self.storage.chunks.write(name, data)
        if self.policy.flow.on_policy and self._packed_version != self.policy_version:
            self.frames.forget()
        path = self.storage.chunks.write(name, self.frames.pack(name, data))
        self.frames.written(name)
        self._packed_version = self.policy_version
        return path

    def evaluate(self, version: int, n_episode: int) -> Dict[str, Any]:
        """Greedy episodes with checkpoint ``version`` (not the collecting policy)."""
        if self._evaluator is None:
            env = EnvManager.from_cfg(
                self.cfg.env, self.cfg.env.evaluator_env_num, seed=self._seed + 10_000, evaluating=True
            )
            self._eval_policy = create_policy(
                self.cfg.policy, env.obs_dim, env.action_spec, seed=self._seed, device="cpu"
            )
            self._evaluator = InteractionSerialEvaluator(
                self.cfg.policy.eval.evaluator,
                env,
                self._eval_policy.eval_mode,
                stop_value=self.cfg.run.stop_value,
                n_evaluator_episode=self.cfg.env.n_evaluator_episode,
                seed=self._seed + 20_000,
            )
        version, state = self._load_for_eval(version)
        self.load_checkpoint(self._eval_policy, version, state)
        _, info = self._evaluator.eval(n_episode=max(n_episode, self._evaluator.env.num_envs))
        info["policy_version"] = version
        record_every = int(self.cfg.policy.eval.evaluator.get("record_every", 0) or 0)
        if record_every > 0 and (self._evaluator.eval_count - 1) % record_every == 0:
            from ..envs.video import record_to_store

            info["video"] = record_to_store(
                self.storage,
                self.cfg,
                self._eval_policy.eval_mode,
                version,
                seed=self._seed + self._evaluator.eval_count,
            )
        return info

    def _load_for_eval(self, version: int) -> Tuple[int, Dict]:
        """(version, state) of checkpoint ``version``; of the newest one if it was pruned meanwhile; of the newest
        loadable one before it if it is damaged. StorageError naming the file when none loads."""
        try:
            found = self.newest_loadable(version)
        except FileNotFoundError:
            latest = self.storage.policies.latest()
            if latest is None or latest < version:
                raise
            found = self.newest_loadable(latest)
        if found is None:
            raise StorageError(
                f"policy checkpoint {self.storage.policies.path(version)} cannot be loaded and no "
                f"loadable one precedes it (see the log); the learner's next checkpoint will do"
            )
        return found

    def close(self) -> None:
        self.collector.close()
        if self._evaluator is not None:
            self._evaluator.close()
