"""DI-engine's ``Coordinator``: our coordinator with DI-engine's ``deal_with_*`` callbacks and ``default_config``.

The core :class:`parallel_rl.coordinator.Coordinator` knows nothing of DI-engine; this subclass adds its surface,
exported under DI-engine's name from here and from ``parallel_rl.worker`` (``ding.worker.Coordinator``).

DI-engine's coordinator is driven by its comm layer calling ``deal_with_*`` with a task id; ours by slaves' typed
messages (:mod:`parallel_rl.coordinator.messages`) and sample requests. Each callback here turns DI-engine's call into the message or
request the task's worker would have sent, and goes through the same check/apply path, so a call written for
DI-engine does through this coordinator what DI-engine's does:

=====================================  ====================================================================
DI-engine                              here
=====================================  ====================================================================
``deal_with_collector_send_data``      a ``chunk`` message: ``data_id`` names the chunk file on the shared
                                       store, ``data`` its metadata (``size``, ``policy_version``, ...)
``deal_with_collector_judge_finish``   the task's env steps reached its spec's ``env_steps``, or the run is over
``deal_with_*_finish_task``            a ``task_done`` message with ``finished_task`` as its result
``deal_with_learner_get_data``         the learners' sample path: one batch of references (DI-engine's buffer
                                       holds metadata too), a list of ``{"data_id", "row", ...}``
``deal_with_learner_send_info``        priorities into the replay index, then a ``learn_info`` message
``deal_with_learner_judge_finish``     the run is over (a learner task trains until then)
``deal_with_increase/decrease_...``    the commander looks again at the collectors (it feeds each free one)
=====================================  ====================================================================

``buffer_id``: a run has one replay index; DI-engine's commander names it, ours does not look it up. Unknown
task ids are handled as DI-engine does: collector callbacks log an error and return, learner ones raise.
"""

from __future__ import annotations

import math
from typing import Any, Dict, List, Optional

from easydict import EasyDict

from ..coordinator.coordinator import Coordinator as _Coordinator
from ..coordinator.defaults import coordinator_default_config
from ..coordinator.tasks import Task, TaskKind

_CHUNK_KEYS = ("size", "policy_version", "env_steps", "episode_returns")


class Coordinator(_Coordinator):
    """:class:`parallel_rl.coordinator.Coordinator` with DI-engine's ``deal_with_*`` callbacks."""

    @classmethod
    def default_config(cls) -> EasyDict:
        """The coordinator's own section of the run config, ``parallel.coordinator``, with its defaults (as
        DI-engine's ``Coordinator.config``; the run config's other sections come from their components)."""
        return coordinator_default_config()

    def _running_task(self, task_id: str, kind: TaskKind) -> Optional[Task]:
        """The running ``kind`` task ``task_id`` names (held by a worker), or None."""
        task = self.tasks.get(task_id)
        if task is not None and task.kind == kind and not task.state.is_final and task.worker_id is not None:
            return task
        return None

    def _collector_task(self, task_id: str) -> Optional[Task]:
        """The running collector task ``task_id`` names; None, logged, when there is none (as DI-engine's)."""
        task = self._running_task(task_id, TaskKind.COLLECTOR)
        if task is None:
            self.error(f"collector task({task_id}) is not a running collector task of this coordinator")
        return task

    def _learner_task(self, task_id: str) -> Task:
        """The running learner task ``task_id`` names; RuntimeError when there is none (as DI-engine's)."""
        task = self._running_task(task_id, TaskKind.LEARNER)
        if task is None:
            raise RuntimeError(
                f"invalid learner task_id({task_id}): learner task({task_id}) is not a running learner task of "
                f"this coordinator; use the id of a running learner task"
            )
        return task

    def _send_as_worker(self, task: Task, message: Dict[str, Any]) -> bool:
        """Check and apply ``message`` as the task's worker sent it; False (logged) when it is refused."""
        assert task.worker_id is not None  # a running task's (_running_task)
        worker = self.membership.get_worker(task.worker_id)
        refused = self.messages.check_and_apply(worker, [message])
        for r in refused:
            self.error(f"{message['type']} message for task({task.task_id}) refused: {r['message']}")
        return not refused

    def deal_with_collector_send_data(self, task_id: str, buffer_id: str, data_id: str, data: dict) -> None:
        task = self._collector_task(task_id)
        if task is not None:
            message = {
                "type": "chunk",
                "task_id": task_id,
                "chunk": data_id,
                **{k: data[k] for k in _CHUNK_KEYS if k in data},
            }
            if self._send_as_worker(task, message):
                self.info(f"collector task({task_id}) send data({data_id})")

    def deal_with_collector_judge_finish(self, task_id: str, data: dict) -> bool:
        task = self._collector_task(task_id)
        if task is None:
            return False
        target = task.spec.get("env_steps", math.inf)
        return bool(self.system_shutdown_flag or task.progress.get("env_steps", 0) >= target)

    def deal_with_collector_finish_task(self, task_id: str, finished_task: dict) -> None:
        task = self._collector_task(task_id)
        if task is not None:
            self._send_as_worker(task, {"type": "task_done", "task_id": task_id, "result": dict(finished_task)})

    def deal_with_learner_get_data(
        self, task_id: str, buffer_id: str, batch_size: int, cur_learner_iter: int
    ) -> Optional[List[dict]]:
        """One batch of ``batch_size`` references (``data_id``: the chunk, ``row`` in it; ``replay_buffer_idx``,
        ``replay_unique_id``, ``IS`` as DI-engine's buffers name them), or None while there is not enough data."""
        self._learner_task(task_id)
        answer = self.flow.metering.sample(self.replay, batch_size, 1, cur_learner_iter, 0.0, "json")
        if not answer.get("batches"):
            return None
        names, batch = answer["chunks"], answer["batches"][0]
        return [
            {"data_id": names[c], "row": r, "replay_buffer_idx": i, "replay_unique_id": u, "IS": w}
            for c, r, i, u, w in zip(batch["chunk"], batch["row"], batch["index"], batch["uid"], batch["weight"])
        ]

    def deal_with_learner_send_info(self, task_id: str, buffer_id: str, info: dict) -> None:
        """``info``: DI-engine's learn info; ``priority_info`` (``replay_buffer_idx``, ``replay_unique_id``,
        ``priority``) updates the replay index, the train iteration (``learner_step``) and the numbers of
        ``learner_info`` (or of ``info`` itself) become the run's learn info."""
        task = self._learner_task(task_id)
        priority = info.get("priority_info")
        if priority:
            self.replay.update_priorities(
                priority["replay_buffer_idx"], priority["replay_unique_id"], priority["priority"]
            )
        numbers = info.get("learner_info", info)
        numbers = {k: v for k, v in numbers.items() if isinstance(v, (int, float)) and math.isfinite(v)}
        train_iter = int(info.get("learner_step", info.get("train_iter", 0)))
        self._send_as_worker(
            task, {"type": "learn_info", "task_id": task_id, "train_iter": train_iter, "info": numbers}
        )

    def deal_with_learner_judge_finish(self, task_id: str, info: dict) -> bool:
        self._learner_task(task_id)
        return bool(self.system_shutdown_flag)

    def deal_with_learner_finish_task(self, task_id: str, finished_task: dict) -> None:
        task = self._learner_task(task_id)
        self._send_as_worker(task, {"type": "task_done", "task_id": task_id, "result": dict(finished_task)})

    def deal_with_increase_collector(self) -> None:
        """A collector was added (``increase_collector(address)``): the commander feeds it at its next step."""
        self.kick()

    def deal_with_decrease_collector(self) -> None:
        """A collector was removed (``decrease_collector(worker_id)``): its task is issued again elsewhere."""
        self.kick()
