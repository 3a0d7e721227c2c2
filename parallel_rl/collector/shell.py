"""CollectorSlave: the collector's process shell in the cluster.

Runs collector tasks (collect ``env_steps`` steps, written as chunk files)
and evaluator tasks (greedy episodes of one policy version). An evaluator
task that arrives mid-collection runs between two chunks, so evaluation
never waits for a collection task to end. A newer policy (on the shared
disk, or announced by the coordinator) is loaded before the next batch of
steps.
"""

from __future__ import annotations

import logging
import os
import time
import uuid
import zlib
from typing import Any, Dict, List, Optional

import numpy as np
from easydict import EasyDict

from ..errors import ParallelRLError
from ..policy.epsilon import exploration_schedule
from ..protocol import Chunk, Games, MetadataBatch, TimeBreakdown
from ..runtime import experiment_dir
from ..tblog import worker_logger
from .serial import concat_columns
from .build import create_parallel_collector
from .cluster import ClusterCollector
from ..slave.comm import BaseCommCollector, register_comm_collector
from ..slave.phases import PhaseClock
from ..transport import ApiError
from ..slave.slave import Slave, SlaveTask
from ..storage.names import chunk_name

logger = logging.getLogger(__name__)


def collector_seed(run_seed: int, worker_id: str) -> int:
    """A collector's seed (its envs take ``seed + i``, its exploration ``seed``): the run's seed offset by a hash of
    the collector's worker id (``collector-1``, ``collector-2``, ... under ``parallel-rl run``). The run's collectors
    draw distinct streams, and a rerun with the same ``seed`` gives each the streams it had (the schedule of chunks
    still depends on timing). A process id (the old offset) put neighbouring collectors' env seeds on top of
    each other and changed with every run."""
    return (run_seed + zlib.crc32(worker_id.encode())) % (2**31)


class CollectorSlave(Slave, BaseCommCollector):
    kind = "collector"

    def __init__(self, *args: Any, seed: Optional[int] = None, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self._seed = seed
        self.collector: Optional[ClusterCollector] = None
        self._prefix = f"c{uuid.uuid4().hex[:8]}"
        self._seq = 0
        self._announced_version = -1
        self._disk_version = -1  # newest policy version seen on the shared disk

    def flush_interval(self, cfg: EasyDict) -> float:
        return float(cfg.parallel.collector.flush_interval)

    def setup(self, cfg: EasyDict) -> None:
        if self.collector is not None:
            return
        seed = self._seed if self._seed is not None else collector_seed(cfg.seed, self.worker_id or self._prefix)
        # a two-player game: the training player against the task's opponent (BattleClusterCollector)
        logger.info("collector %s: seed %d", self.worker_id, seed)
        self.collector = create_parallel_collector(cfg, self.storage, seed=seed)
        # the policy's data flow meters this collector (parallel_rl.data.flows): off-policy by the cluster's
        # allowance, synchronous on-policy by its share of the current version's segment, asynchronous by its
        # share of the room in the learner's queue
        self.flow = self.collector.policy.flow
        self.meter = self.flow.collector_meter()
        # where the time goes beside env steps and forwards (those the collector counts): see time_breakdown
        self.clock = PhaseClock(("chunk_write", "policy_load", "waiting", "evaluate"))

        def tb_dir(name: str) -> str:
            return self.storage.local_dir("tensorboard", name, fallback=experiment_dir(cfg))

        # every evaluation (plot reads them); the collector's own scalars under the worker id the REST API shows
        self.tb_eval = worker_logger(cfg.system, tb_dir("evaluator"), every_point=True)
        self.tb = worker_logger(cfg.system, tb_dir(self.worker_id or f"collector-pid{os.getpid()}"))

    def teardown(self) -> None:
        if self.collector is not None:
            self.collector.close()
            self.collector = None
            self.tb.close()
            self.tb_eval.close()

    def validate_task(self, task: SlaveTask) -> None:
        if task.kind == "collector":
            if not isinstance(task.spec.get("env_steps"), int) or task.spec["env_steps"] <= 0:
                raise ApiError(400, "bad_request", f"collector task needs env_steps > 0, got {task.spec!r}")
            players = task.spec.get("players")
            if players is not None and not (isinstance(players, dict) and isinstance(players.get("opponent"), str)):
                raise ApiError(
                    400,
                    "bad_request",
                    f"collector task players must be {{'train': 'main', 'opponent': NAME}}, got {players!r:.80}",
                )
        elif task.kind == "evaluator":
            if not isinstance(task.spec.get("policy_version"), int):
                raise ApiError(400, "bad_request", f"evaluator task needs policy_version, got {task.spec!r}")
        else:
            raise ApiError(400, "bad_request", f"a collector runs collector and evaluator tasks, not {task.kind!r}")

    def time_breakdown(self) -> Optional[TimeBreakdown]:
        collector = self.collector  # the heartbeat thread reads it; teardown may clear it meanwhile
        return None if collector is None else self.clock.breakdown(**collector.phase_seconds())

    # ---- BaseCommCollector ------------------------------------------------------------------
    @property
    def collector_uid(self) -> Optional[str]:
        return self.worker_id

    def get_policy_update_info(self, path: Optional[str] = None) -> Optional[int]:
        """The newest policy version on the shared disk, if newer than ours (``path`` is ignored:
        every path comes from the storage module)."""
        return self.collector.get_policy_update_info()

    def send_stepdata(self, path: str, stepdata: Dict[str, np.ndarray]) -> str:
        """Write ``stepdata`` atomically as chunk ``path`` under the shared store's data directory (DI-engine's
        arguments); returns the file's full path."""
        return self.collector.send_stepdata(path, stepdata)

    # ---- policy -------------------------------------------------------------------------
    def newer_policy_out(self) -> bool:
        """A policy newer than ours appeared on the shared disk (checked after every batch of steps)
        or was announced by the coordinator (control block: at most one outbox round trip late)."""
        on_disk = self.get_policy_update_info()
        if on_disk is not None:
            self._disk_version = max(self._disk_version, on_disk)
        return max(self._wanted_versions(), default=-1) > self.collector.policy_version

    def _wanted_versions(self) -> List[int]:
        """The newest policy versions seen on the disk and announced, newest first (a damaged one left out: it is
        never loaded, and must not cut every chunk short as "a newer policy is out")."""
        return sorted(
            {
                v
                for v in (self._disk_version, int(self.control.get("policy_version", -1)))
                if v not in self.collector.damaged_versions
            },
            reverse=True,
        )

    def refresh_policy(self) -> None:
        """Load the newest policy seen on the disk or announced (the newest loadable one before it when it is
        damaged)."""
        with self.clock.timing("policy_load"):
            self.newer_policy_out()
            for wanted in sorted({self._disk_version, int(self.control.get("policy_version", -1))}, reverse=True):
                if self.collector.update_policy(wanted):  # False unless newer and on the disk
                    logger.debug("collector %s: policy version %d", self.worker_id, wanted)
                    return

    # ---- tasks ----------------------------------------------------------------------------
    def execute(self, task: SlaveTask) -> Dict[str, Any]:
        if task.kind == "evaluator":
            return self._evaluate(task)
        return self._collect(task)

    def _evaluate(self, task: SlaveTask) -> Dict[str, Any]:
        with self.clock.timing("evaluate"):
            result = self.collector.evaluate(task.spec["policy_version"], int(task.spec.get("n_episode", 1)))
        self.tb_eval.scalars(
            result["policy_version"],
            "evaluator/",
            eval_return=result["eval_episode_return_mean"],
            episode_length=result["episode_length_mean"],
        )
        self.tb_eval.flush()
        result["completed"] = True
        return result

    def _run_waiting_evals(self) -> None:
        """Evaluator tasks preempt collection between two chunks (and run before collecting after a wait).
        On-policy, the control block is fetched again after one: while this collector evaluated, the others
        took over its share of the segment and the policy may have moved on."""
        ran = False
        while True:
            task = self.inbox.take(lambda t: t.kind == "evaluator")
            if task is None:
                break
            self._run_task(task)
            ran = True
        if ran and self.flow.on_policy:
            self._long_poll_allowance(None)

    def _allowance_left(self, unreported: int) -> Optional[int]:
        """Env steps this collector may still collect (None: no limit). On-policy only with the current
        policy version: the control block says how many env steps this collector may collect with it in
        all (its share of that version's segment), counted against what it sent with that version."""
        return self.meter.left(self.control, self.collector.policy_version, unreported)

    def _over_allowance(self, unreported: int) -> bool:
        """True when the cluster has collected as much as the learner may use for now."""
        left = self._allowance_left(unreported)
        return left is not None and left <= 0

    def on_control(self, control: Dict[str, Any]) -> None:
        super().on_control(control)
        # the block counts our chunks only if their messages all reached the coordinator: one answering a
        # heartbeat while a chunk's message waits in the outbox would let us collect that chunk's steps again
        if self.collector is not None and self.outbox is not None and self.outbox.empty():
            self.meter.on_control()

    def _fresh_policy(self) -> bool:
        """True when the loaded policy has not been announced in a chunk yet."""
        return self.collector.policy_version != self._announced_version

    def _wait_for_allowance(self, task: SlaveTask) -> None:
        """Throttled: send what we have and wait (long-poll) until the learner catches up.

        A new policy ends the wait: its first batch goes out at once (it tells the coordinator the policy
        is in use), borrowing from the allowance that follows."""
        while not task.stop.is_set() and self._over_allowance(0):
            self._run_waiting_evals()  # given while waiting: run now (on-policy, the segment goes on without us)
            self.refresh_policy()
            if self._fresh_policy() and self.flow.new_version_ends_wait:
                return
            with self.clock.timing("waiting"):
                if not self._long_poll_allowance(task):
                    return

    def _long_poll_allowance(self, task: Optional[SlaveTask]) -> bool:
        """Send what we have and ask the coordinator to answer once we may collect again (``task`` None: at
        once, the control block as it is now); False when it failed."""
        self.outbox.flush(timeout=2.0)
        try:
            # a version announced but not loadable yet (not visible on the shared disk) must not end
            # the next wait at once: ask to be woken by a newer one only
            loaded = self.collector.policy_version
            known = max(loaded, int(self.control.get("policy_version", -1)))
            body = MetadataBatch(
                messages=[],
                wait_for_allowance=0.0 if task is None else 1.0,
                policy_version=known if self.meter.woken_by_versions(loaded) else None,
                loaded_version=loaded if self.flow.on_policy else None,
            ).to_json()
            answer = self.coordinator.post(
                f"/api/v1/workers/{self.worker_id}/metadata", body, timeout=self.coordinator.timeout + 1.0
            )
        except ParallelRLError as exc:
            logger.warning("collector %s: waiting for allowance failed: %s", self.worker_id, exc)
            return False
        self.on_control(answer["control"])
        if answer.get("retry_after") and task is not None:  # every long-poll slot was taken: ask again later
            task.stop.wait(min(float(answer["retry_after"]), 5.0))
        return True

    def _next_chunk_name(self) -> str:
        self._seq += 1
        return chunk_name(self._prefix, self._seq)

    def _collect(self, task: SlaveTask) -> Dict[str, Any]:
        ccfg = self.cfg.parallel.collector
        chunk_size = int(ccfg.chunk_size)
        n_sample = max(1, min(chunk_size, int(self.cfg.policy.collect.n_sample)))
        envs = int(self.cfg.env.collector_env_num)
        target = int(task.spec["env_steps"])
        steps = transitions = chunks = 0
        returns: List[float] = []
        task_started = time.monotonic()
        games = {"win": 0, "draw": 0, "loss": 0}
        opponent = missing = None
        if task.spec.get("players") is not None:  # a two-player game (BattleClusterCollector)
            opponent, missing = self.collector.set_opponent(task.spec["players"]["opponent"])
        while steps < target and not task.stop.is_set():
            self._wait_for_allowance(task)  # runs the evaluations given while it waits
            self._run_waiting_evals()  # and those given before or as it ended: on-policy, its share went to the others
            self.refresh_policy()
            eps = float(self.control.get("epsilon", exploration_schedule(self.cfg.policy)(0)))
            random_collect = bool(self.control.get("random_collect", False))
            pieces, chunk_steps, chunk_returns, chunk_outcomes = [], 0, [], []
            started = time.monotonic()
            version, fresh = self.collector.policy_version, self._fresh_policy()
            # one chunk: up to chunk_size transitions, one policy version, at most flush_interval old
            have = 0
            while (
                have < chunk_size
                and steps + chunk_steps < target
                and not task.stop.is_set()
                and (
                    not self._over_allowance(chunk_steps) or (fresh and not pieces and self.flow.new_version_ends_wait)
                )
            ):
                ask = min(n_sample, chunk_size - have)
                ask = self.meter.clip(ask, self._allowance_left(chunk_steps), chunk_size - have - envs + 1)
                if ask <= 0:
                    break
                data, stats = self.collector.collect(ask, eps, random_collect)
                have += len(data["action"])
                pieces.append(data)
                chunk_steps += stats.env_steps
                chunk_returns += stats.returns.tolist()
                chunk_outcomes += getattr(stats, "outcomes", [])
                if time.monotonic() - started >= ccfg.flush_interval:
                    break
                if fresh:
                    break  # the first chunk of a new policy version is announced after one batch of steps
                if self.newer_policy_out():
                    break  # a new policy is out: close this chunk, stamp the next with it
            if not pieces:
                if not self.flow.new_version_ends_wait and not task.stop.is_set():
                    continue  # a newer policy came between the wait and the chunk: wait for its share
                break
            with self.clock.timing("chunk_write"):
                data = concat_columns(pieces)
                name = self._next_chunk_name()
                self.send_stepdata(name, data)
            # the first chunk of a new policy version leaves at once: it tells the coordinator the policy is in use
            self.send_metadata(
                Chunk(
                    chunk=name,
                    size=int(len(data["action"])),
                    policy_version=version,
                    env_steps=chunk_steps,
                    episode_returns=chunk_returns,
                    task_id=task.task_id,
                ).to_json(),
                urgent=fresh or self.flow.urgent_chunks,
            )  # on-policy, the learner waits for it
            if opponent is not None and chunk_outcomes:  # the games' results, for the league's payoff table
                counts = {o: chunk_outcomes.count(o) for o in games}
                self.send_metadata(Games(task_id=task.task_id, opponent=opponent, player="main", **counts).to_json())
                games = {o: games[o] + counts[o] for o in games}
            self._announced_version = version
            self.meter.sent(self.control, version, chunk_steps)
            steps += chunk_steps
            transitions += len(data["action"])
            chunks += 1
            returns += chunk_returns
        self._run_waiting_evals()
        elapsed = time.monotonic() - task_started
        mean_return = float(np.mean(returns)) if returns else None
        self.tb.scalars(
            self.collector.envstep,
            "collector/",
            env_steps_per_second=steps / elapsed if elapsed else 0.0,
            mean_return=mean_return,
        )
        result = {
            "env_steps": steps,
            "transitions": transitions,
            "chunks": chunks,
            "episodes": len(returns),
            "mean_return": mean_return,
            "policy_version": self.collector.policy_version,
            "completed": steps >= target,
        }
        if opponent is not None:
            result.update(opponent=opponent, games=games)
            if missing is not None:
                result["opponent_missing"] = missing
        return result


register_comm_collector("flask_fs", CollectorSlave)
