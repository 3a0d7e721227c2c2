"""LearnerSlave: the learner's process shell in the cluster.

A learner task trains until stopped. :class:`~.pipeline.DataPipeline` keeps the next batches ready while
the learner trains on the current one. Every ``publish_every`` iterations the policy is written to the shared
disk and announced; every ``save_state_every`` the full learner state (optimizer included) too, so a new
learner resumes where a dead one stopped.
"""

from __future__ import annotations

import logging
import os
import time
from typing import Any, Dict, Optional

import numpy as np
from easydict import EasyDict

from ..envs.fit import env_spaces
from ..policy import create_policy
from ..protocol import ChunkDamaged, LearnInfo, Policy, TimeBreakdown
from ..runtime import experiment_dir
from ..slave.comm import BaseCommLearner, register_comm_learner
from ..slave.phases import PhaseClock
from ..slave.slave import Slave, SlaveTask
from ..tblog import worker_logger
from ..transport import ApiError
from .learner import create_learner, store_saving
from .defaults import LearnerSection
from .pipeline import DataPipeline, PipelineSection
from .warm_start import warm_start

logger = logging.getLogger(__name__)


class LearnerSlave(Slave, BaseCommLearner):
    kind = "learner"
    loads_rows = True  # the data pipeline hands over rows (False: references, each rank reads its share)

    def validate_task(self, task: SlaveTask) -> None:
        if task.kind != "learner":
            raise ApiError(400, "bad_request", f"a learner runs learner tasks, not {task.kind!r}")
        with self._lock:
            if self._running:
                raise ApiError(409, "conflict", f"already running {sorted(self._running)}")

    clock: Optional[PhaseClock] = None  # where the time goes (see time_breakdown); made once, at the first setup

    def setup(self, cfg: EasyDict) -> None:
        obs_shape, self.action_spec = env_spaces(cfg.env, cfg.policy.type)
        self.obs_dim = int(np.prod(obs_shape))
        if self.clock is None:
            self.clock = PhaseClock(
                ("waiting_for_data", "train", "publishing"), background=("sample_request", "reading_rows")
            )

    def time_breakdown(self) -> Optional[TimeBreakdown]:
        return None if self.clock is None else self.clock.breakdown()

    # ---- the learner's outputs --------------------------------------------------------------
    def send_policy(self, policy, train_iter: int, final: bool = False) -> None:
        """Write policy checkpoint ``train_iter`` (and, periodically, the full state) and announce it.

        On-policy the full state goes with every checkpoint, first: a learner that takes over resumes at
        the newest version the collectors act with (an older one would never get a segment)."""
        lcfg = self.cfg.parallel.learner
        with self.clock.timing("publishing"):
            saves_state = (
                final or policy.flow.state_with_every_checkpoint or train_iter % int(lcfg.save_state_every) == 0
            )
            if saves_state:
                self.storage.learner_states.save(train_iter, {"policy": policy.state_dict(), "train_iter": train_iter})
            self.storage.policies.save(train_iter, policy.model_state_dict())
            self.storage.prune_checkpoints(int(lcfg.keep_checkpoints), states=saves_state)
            self.send_metadata(Policy(version=train_iter).to_json(), urgent=True)

    def send_learn_info(self, task: SlaveTask, learner, pipeline: DataPipeline, rate: float = 0.0) -> None:
        info = {k: v for k, v in learner.learn_info.items() if isinstance(v, (int, float))}
        info["missing_rows"] = pipeline.missing_rows
        info["damaged_chunks"] = pipeline.damaged_chunks
        info["data_wait_seconds"] = round(pipeline.wait_seconds, 3)
        info["updates_per_second"] = round(rate, 1)
        # what a stop may have to wait for (the launcher's shutdown grace follows it)
        info["longest_update_seconds"] = round(self.longest_update, 3)
        info.update(self.data_stats)
        # whatever scalars the policy reports (DQN: loss, q_value, td_error; PPO: policy_loss, entropy, ...)
        self.tb.scalars(
            learner.train_iter,
            "learner/",
            **{k: v for k, v in info.items() if k not in ("train_iter", "envstep", "missing_rows")},
        )
        self.send_metadata(LearnInfo(train_iter=learner.train_iter, info=info, task_id=task.task_id).to_json())

    data_stats: Dict[str, int] = {}
    longest_update = 0.0  # seconds: the longest single update so far (an on-policy version's epochs)

    def report_damaged_chunk(self, name: str, reason: str) -> None:
        """Tell the coordinator that chunk ``name`` cannot be read: it drops the chunk from its replay index."""
        self.send_metadata(ChunkDamaged(chunk=name, error=reason[:300]).to_json(), urgent=True)

    def get_data(self, pipeline: DataPipeline, timeout: float) -> Optional[Dict[str, np.ndarray]]:
        return pipeline.get(timeout)

    # ---- the task -----------------------------------------------------------------------------
    # hooks of the training run (a LearnerAggregator runs them across its ranks)
    def start_training(self, policy, learner) -> None:
        """Called once the policy is built (and resumed), before the first batch."""

    def stop_training(self) -> None:
        """Called when the run ends (normally or not), after the data pipeline stopped."""

    def train_step(self, learner, batch: Dict[str, np.ndarray]) -> None:
        """One update on ``batch``; ``learner.priority_info`` holds its priorities afterwards."""
        learner.train(batch)

    def execute(self, task: SlaveTask) -> Dict[str, Any]:
        return self.run_training(task, resume=bool(task.spec.get("resume")))

    def run_training(self, task: SlaveTask, resume: bool) -> Dict[str, Any]:
        """Train until ``task`` is stopped; ``resume``: from the newest good learner state on the shared disk."""
        cfg = self.cfg
        policy = create_policy(cfg.policy, self.obs_dim, self.action_spec, seed=cfg.seed)
        learner = create_learner(
            store_saving(cfg.policy.learn.learner),
            policy.learn_mode,
            exp_dir=None,
            instance_name=f"learner {self.worker_id}",
        )
        found = self.storage.learner_states.latest_good() if resume else None
        if found is not None:
            version, state = found
            policy.load_state_dict(state["policy"])
            learner.train_iter = int(state["train_iter"])
            logger.info("learner %s: resumed from learner state %d", self.worker_id, version)
        else:  # a run's first learner (or one that took over before any state was saved): the warm start, if any
            source = warm_start(policy, cfg)
            if source is not None:
                logger.info("learner %s: started from %s (parallel.learner.init_from)", self.worker_id, source)
        start_iter = learner.train_iter
        self.start_training(policy, learner)
        self.send_policy(policy, learner.train_iter)
        # on-policy: one update per batch (the policy runs its epochs over it), every update published, and what
        # the learner trained on reported (flow.learner_stats): batches, their rows and the largest staleness
        # (train_iter - the oldest policy version in a batch) it ever saw
        flow = policy.flow
        name = flow.learner_stats
        self.data_stats = (
            {f"{name}s": 0, f"{name}_rows": 0, f"{name}_rows_total": 0, f"{name}_staleness_max": 0} if name else {}
        )
        pipeline = DataPipeline(
            PipelineSection.read(cfg, flow),
            flow,
            self.coordinator,
            self.worker_id,
            self.storage,
            on_control=self.on_control,
            on_damaged=self.report_damaged_chunk,
            load_rows=self.loads_rows,
            clock=self.clock,
        ).start()
        publish_every = flow.publish_every(LearnerSection.read(cfg))
        # under the worker id the REST API shows (learner-1; a restarted learner: learner-2, ...)
        self.tb = worker_logger(
            cfg.system,
            self.storage.local_dir(
                "tensorboard", self.worker_id or f"learner-pid{os.getpid()}", fallback=experiment_dir(cfg)
            ),
        )
        last_info, last_iter = time.monotonic(), learner.train_iter
        started = time.monotonic()
        learner.call_hook("before_run")
        try:
            try:
                while not task.stop.is_set():
                    with self.clock.timing("waiting_for_data"):
                        batch = self.get_data(pipeline, timeout=0.25)
                    if batch is None:
                        if pipeline.error:
                            raise RuntimeError(pipeline.error)
                        continue
                    if name:
                        self._count_batch(name, batch, learner.train_iter)
                    began = time.monotonic()
                    with self.clock.timing("train"):
                        self.train_step(learner, batch)
                    self.longest_update = max(self.longest_update, time.monotonic() - began)
                    pipeline.give_priorities(learner.priority_info)
                    if learner.train_iter % publish_every == 0:
                        self.send_policy(policy, learner.train_iter)
                    pipeline.trained(learner.train_iter)
                    now = time.monotonic()
                    if now - last_info >= 0.25:
                        self.send_learn_info(
                            task, learner, pipeline, (learner.train_iter - last_iter) / (now - last_info)
                        )
                        last_info, last_iter = now, learner.train_iter
            finally:
                pipeline.stop()
                self.stop_training()
                learner.call_hook("after_run")
            self.send_policy(policy, learner.train_iter, final=True)
            self.send_learn_info(task, learner, pipeline)
        finally:
            self.tb.close()
        elapsed = time.monotonic() - started
        return {
            "train_iter": learner.train_iter,
            "updates": learner.train_iter - start_iter,
            "updates_per_second": (learner.train_iter - start_iter) / elapsed if elapsed > 0 else 0.0,
            **self.data_stats,
        }

    def _count_batch(self, name: str, batch: Dict[str, np.ndarray], train_iter: int) -> None:
        """What the learner is about to train on, from the rows themselves (each carries its policy version)."""
        staleness = train_iter - int(batch["collect_iter"].min())
        stats = self.data_stats
        stats[f"{name}s"] += 1
        stats[f"{name}_rows"] = len(batch["collect_iter"])
        stats[f"{name}_rows_total"] += len(batch["collect_iter"])
        stats[f"{name}_staleness_max"] = max(stats[f"{name}_staleness_max"], staleness)
        if staleness > int(self.cfg.policy.other.replay_buffer.max_staleness):
            logger.error(
                "learner %s: a %s %d versions old reached iteration %d (max_staleness %d)",
                self.worker_id,
                name,
                staleness,
                train_iter,
                self.cfg.policy.other.replay_buffer.max_staleness,
            )


register_comm_learner("flask_fs", LearnerSlave)
