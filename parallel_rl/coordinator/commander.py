"""Commanders decide which task goes to which worker.

:class:`SoloCommander`: one learner task; a collector task for every free
collector; an evaluator task on a collector whenever the policy has advanced
``run.eval_freq`` iterations since the last evaluation; failed tasks are replaced
(up to ``max_task_attempts`` within ``task_failure_window``); epsilon decays with collected env steps.
The coordinator calls :meth:`step` whenever something changed. What a commander implements and what it
may do of the coordinator: :mod:`.commander_api`.
"""

from __future__ import annotations

import logging
import time
from typing import Optional

from easydict import EasyDict

from ..config.schema import check_cluster_config
from ..policy.epsilon import exploration_schedule
from ..registry import Registry
from .commander_api import CommanderHandle
from ..league import MAIN, SELF, League, snapshot_version
from .tasks import Task, TaskKind, TaskState
from .workers import Worker, WorkerState

from .defaults import commander_default_config  # noqa: E402,F401 (its section, beside the coordinator's)

logger = logging.getLogger(__name__)

COMMANDER_REGISTRY = Registry("commander")

# how a task that failed on a ConfigError reports it (the slaves' "<exception type>: <message>")
CONFIG_ERROR_PREFIX = "ConfigError: "
# seconds a due evaluation waits for a spare collector (synchronous on-policy) before it takes any
EVAL_SPARE_WAIT = 2.0


class SoloCommander:
    """A :class:`~parallel_rl.coordinator.commander_api.Commander`."""

    def __init__(self, cfg: EasyDict, cluster: Optional[CommanderHandle] = None):
        """``cluster`` may be attached later (:meth:`attach`: the Coordinator does it when given this commander)."""
        self.cfg = cfg
        self.cluster = cluster
        self.ccfg = cfg.parallel.commander
        self._epsilon = exploration_schedule(cfg.policy)
        self.last_eval_version: Optional[int] = None
        self._eval_waits_since: Optional[float] = None  # monotonic: a due evaluation found no spare collector
        self._evaluator_id: Optional[str] = None  # the collector that ran the last evaluation (its envs are built)

    def attach(self, cluster: CommanderHandle) -> None:
        self.cluster = cluster

    def epsilon(self, env_steps: int) -> float:
        return self._epsilon(env_steps)

    # ---- scheduling ------------------------------------------------------------------
    def step(self) -> None:
        if self.cluster.over:
            return
        self._assign_pending()
        self._ensure_learner()
        self._feed_collectors()
        self._schedule_eval()

    def _free_workers(self, kind: str) -> list:
        # a worker backing off after a task it failed on the shared store is not free (its next task would fail)
        return [
            w
            for w in self.cluster.workers(kind)
            if w.state == WorkerState.IDLE and w.current_task is None and w.assignable
        ]

    def _assign_pending(self) -> None:
        c = self.cluster
        for task in c.tasks(state=TaskState.PENDING.value):
            if task.kind == TaskKind.EVALUATOR:
                worker = self._eval_worker()
            else:
                free = self._free_workers("learner" if task.kind == TaskKind.LEARNER else "collector")
                worker = free[0] if free else None
            if worker is not None:
                c.assign(task, worker)

    def _ensure_learner(self) -> None:
        c = self.cluster
        live = [t for t in c.tasks(kind=TaskKind.LEARNER.value) if not t.state.is_final]
        if live:
            return
        free = self._free_workers("learner")
        if free:
            spec = {"resume": c.storage.learner_states.latest() is not None}
            c.assign(c.create_task(TaskKind.LEARNER, spec), free[0])

    def _feed_collectors(self) -> None:
        c = self.cluster
        for worker in self._free_workers("collector"):
            task = c.create_task(TaskKind.COLLECTOR, {"env_steps": int(self.ccfg.collector_task_env_steps)})
            c.assign(task, worker)

    def _eval_worker(self) -> Optional[Worker]:
        """The collector for the next evaluation. Synchronous on-policy: one whose share of the current segment
        is in (evaluating, a collector collects nothing, and a segment would wait for its share), any one
        after EVAL_SPARE_WAIT seconds without such a collector. Among those, the one that ran the last
        evaluation: a collector builds its evaluator's envs and policy on its first evaluation (8 env processes
        with ``evaluator_vector_mode=async``: 1.5-3 s on a busy 2-core box, against 0.1 s for the episodes of a
        poor CartPole policy), and spreading evaluations over 16 collectors made every one of them pay it.
        Otherwise the one that finished the fewest tasks."""
        candidates = [w for w in self.cluster.workers("collector") if w.assignable and w.eval_task is None]
        spare = [w for w in candidates if self.cluster.spare(w) is not False]
        if not spare and candidates:
            self._eval_waits_since = self._eval_waits_since or time.monotonic()
            if time.monotonic() - self._eval_waits_since < EVAL_SPARE_WAIT:
                return None
            spare = candidates
        self._eval_waits_since = None
        return min(spare, key=lambda w: (w.worker_id != self._evaluator_id, w.tasks_done), default=None)

    def _schedule_eval(self) -> None:
        c = self.cluster
        version = c.policy_version
        if version < 0:
            return
        if self.last_eval_version is not None and version - self.last_eval_version < self.cfg.run.eval_freq:
            return
        if any(not t.state.is_final for t in c.tasks(kind=TaskKind.EVALUATOR.value)):
            return
        worker = self._eval_worker()
        if worker is None:
            return
        self.last_eval_version = version
        self._evaluator_id = worker.worker_id
        spec = {"policy_version": version, "n_episode": int(self.cfg.env.n_evaluator_episode)}
        c.assign(c.create_task(TaskKind.EVALUATOR, spec), worker)

    # ---- persistence ---------------------------------------------------------------------------
    def state_dict(self) -> dict:
        """What the commander keeps beyond the coordinator's own state, as JSON values (in its snapshots)."""
        return {}

    def load_state_dict(self, state: dict) -> None:
        if state.get("league") is not None:
            raise ValueError(
                f"the saved state holds a league (two-player self-play) but this config's "
                f"parallel.commander.type is {self.ccfg.type!r}"
            )

    # ---- failures ----------------------------------------------------------------------
    def on_task_failed(self, task: Task, store_fault: bool = False) -> None:
        """Create a replacement task unless the attempts are used up: ``max_task_attempts`` failures of the task's
        chain within ``task_failure_window`` seconds (a learner killed now and then over days goes on; one that
        dies again and again does not).

        A failure on the shared store (``store_fault``: the worker reported the store unhealthy) counts at most
        once per ``parallel.worker.storage_max_backoff`` seconds of the chain: a store read-only for a few
        seconds fails a task several times within its backoff (0.5, 1, 2 s ...) and must not end the run, while
        a store that stays down still does, after ``max_task_attempts`` such periods. A learner task that failed on
        a ConfigError ends the run at once: a replacement would fail alike."""
        if task.kind == TaskKind.LEARNER and (task.error or "").startswith(CONFIG_ERROR_PREFIX):
            # the learner cannot start from what the config says (a parallel.learner.init_from that does not load
            # or fit): every learner would fail alike, and the collectors would go on without one, so the run ends
            logger.error("commander: %s failed on the config, not retrying: %s", task.task_id, task.error)
            self.cluster.finish("failed", f"learner task failed on the config: {task.error}")
            return
        now = time.time()
        window = float(self.ccfg.task_failure_window)
        failures = [t for t in task.failures if window <= 0 or now - t <= window]
        quiet = float(self.cfg.parallel.worker.storage_max_backoff)
        if not (store_fault and failures and now - failures[-1] < quiet):
            failures.append(now)
        else:
            logger.info("commander: %s failed on the shared store again within %gs: counted once", task.task_id, quiet)
        if len(failures) >= self.ccfg.max_task_attempts:
            within = f" within {window:g}s" if window > 0 else ""
            logger.error(
                "commander: %s failed %d times%s, not retrying: %s", task.task_id, len(failures), within, task.error
            )
            if task.kind == TaskKind.LEARNER:
                self.cluster.finish("failed", f"learner task failed {len(failures)} times{within}: {task.error}")
            elif (task.error or "").startswith(CONFIG_ERROR_PREFIX):
                # the config cannot run (e.g. a game found not zero-sum mid-run): every new task would fail
                # alike, so the run ends instead of failing task after task
                self.cluster.finish(
                    "failed", f"{task.kind.value} task failed {len(failures)} times{within} on the config: {task.error}"
                )
            return
        spec = dict(task.spec)
        if task.kind == TaskKind.LEARNER:
            spec["resume"] = True
        if task.kind == TaskKind.EVALUATOR:
            spec["policy_version"] = max(spec["policy_version"], self.cluster.policy_version)
        replacement = self.cluster.create_task(task.kind, spec, replaces=task, failures=failures)
        logger.info(
            "commander: %s replaces failed %s (attempt %d of %d%s)",
            replacement.task_id,
            task.task_id,
            len(failures) + 1,
            self.ccfg.max_task_attempts,
            f" within {window:g}s" if window > 0 else "",
        )

    def on_task_finished(self, task: Task) -> None:
        """Nothing to do: the next :meth:`step` hands the worker a new task."""


COMMANDER_REGISTRY.register("solo", SoloCommander)


class LeagueCommander(SoloCommander):
    """Two-player self-play (``parallel.commander.type = "league"``): the solo commander's scheduling, plus
    an opponent :class:`~parallel_rl.league.League`.

    Every ``league.snapshot_every`` policy versions the newest checkpoint is frozen into the league (a copy
    under ``league/`` on the shared disk, so checkpoint pruning never removes a pool member) and joins the
    pool; a snapshot leaving the pool is deleted once no unfinished collector task names it (a task handed
    out just before still finds its opponent). Each collector task names its opponent, chosen by PFSP;
    the collectors' ``games`` messages fill the payoff table. A task that reports ``opponent_missing``
    takes that opponent out of the pool. The run stops on the evaluator's win-rate target.
    """

    def __init__(self, cfg: EasyDict, cluster: Optional[CommanderHandle] = None):
        check_cluster_config(cfg)
        super().__init__(cfg, cluster)
        self.league = League(cfg.league, seed=cfg.seed)
        self._leaving: set = set()  # retired snapshots whose files wait for the tasks that name them

    def step(self) -> None:
        if not self.cluster.over:
            self._snapshot()
        self._remove_retired()
        super().step()

    def state_dict(self) -> dict:
        """The league (pool, retired snapshots, payoff table, games played): a resumed coordinator goes on with it."""
        return {"league": self.league.state_dict()}

    def load_state_dict(self, state: dict) -> None:
        """Restore the league; a state saved before leagues were kept starts a new one (logged)."""
        if state.get("league") is None:
            logger.warning("commander: the saved state holds no league; starting a new one")
            return
        self.league.load_state_dict(state["league"])
        self._leaving.update(self.league.retired)  # files a stopped coordinator had not removed yet
        logger.info("commander: league restored: pool %s, %d games", self.league.pool, self.league.games)

    def _snapshot(self) -> None:
        version = self.cluster.policy_version
        if version < 0 or not self.league.wants_snapshot(version):
            return
        storage = self.cluster.storage
        try:
            storage.league.freeze(version)
        except FileNotFoundError:  # pruned already: the next version will do
            logger.warning(
                "commander: policy %d is gone before it could join the league; waiting for the next", version
            )
            return
        gone = self.league.add_snapshot(version)
        if gone is not None:
            self._leaving.add(gone)

    def _remove_retired(self) -> None:
        """Delete the files of retired snapshots that no pending or running collector task names."""
        if not self._leaving:
            return
        named = {
            (t.spec.get("players") or {}).get("opponent")
            for state in (TaskState.PENDING, TaskState.RUNNING)
            for t in self.cluster.tasks(TaskKind.COLLECTOR.value, state.value)
        }
        for name in sorted(self._leaving - named):
            self.cluster.storage.league.remove(snapshot_version(name))
            self._leaving.discard(name)

    def _feed_collectors(self) -> None:
        c = self.cluster
        for worker in self._free_workers("collector"):
            spec = {
                "env_steps": int(self.ccfg.collector_task_env_steps),
                "players": {"train": MAIN, "opponent": self.league.choose_opponent()},
            }
            c.assign(c.create_task(TaskKind.COLLECTOR, spec), worker)

    def on_games(self, opponent: str, counts: dict) -> None:
        """A collector's game results: the training player's wins, draws and losses against ``opponent``."""
        outcomes = [o for o in ("win", "draw", "loss") for _ in range(int(counts.get(o, 0)))]
        self.league.record(MAIN, MAIN if opponent == SELF else opponent, outcomes)

    def on_task_finished(self, task: Task) -> None:
        missing = (task.result or {}).get("opponent_missing")
        if isinstance(missing, str):
            logger.warning("commander: opponent %s is gone from the shared disk; it leaves the pool", missing)
            self.league.remove(missing)


COMMANDER_REGISTRY.register("league", LeagueCommander)


def create_parallel_commander(cfg: EasyDict, cluster: Optional[CommanderHandle] = None):
    """Build the commander named by ``cfg.parallel.commander.type`` (``solo`` or a registered one): a
    :class:`~parallel_rl.coordinator.commander_api.Commander`."""
    return COMMANDER_REGISTRY.build(cfg.parallel.commander.type, cfg, cluster)
