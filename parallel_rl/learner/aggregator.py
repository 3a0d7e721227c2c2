"""LearnerAggregator: N data-parallel learner ranks that the coordinator sees as one learner worker.

DI-engine's ``LearnerAggregator`` presents several learner processes to its coordinator as one; here it
is the learner slave itself, as rank 0 of a ``torch.distributed`` process group of
``parallel.learner.world_size`` ranks (gloo on the CPU; NCCL carries CUDA gradients):

- it hosts the rendezvous (a ``TCPStore`` at ``master_addr:master_port``) and starts ranks 1..N-1 as local
  processes (``parallel-rl learner-rank`` with ``MASTER_ADDR``/``MASTER_PORT``/``RANK``/``WORLD_SIZE``), or
  waits for ranks started on other hosts (``spawn_ranks=false``);
- it sends every rank the config and its own learner state (the ranks start identical), then, for each
  batch the coordinator samples, the batch's references: every rank reads its own share of the rows from
  the shared store and trains on it; the optimizer averages the gradients over the ranks
  (:mod:`parallel_rl.policy.distributed`), so every rank holds the same parameters after each update;
- it collects the priorities of every share (for the coordinator's replay index) and, a few times a
  second, the ranks' learn info (averaged), publishes checkpoints and talks to the coordinator as any
  learner does, and lists its ranks (rank, pid, state) in its heartbeats (``GET /api/v1/learners``);
- a rank that dies (or a collective that times out: ``collective_timeout``) is reported, the other ranks
  are stopped, and the group restarts from the last learner state on the shared disk, at most
  ``max_rank_restarts`` times per task.

With ``world_size=1`` it is exactly :class:`LearnerSlave`.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import select
import subprocess
import sys
import time
from dataclasses import dataclass, field
from enum import Enum, IntEnum
from typing import Any, Dict, List, Optional

import numpy as np
import torch
import torch.distributed as dist
from easydict import EasyDict

from ..envs.fit import env_spaces
from ..errors import ConfigError, LearnerRankLostError
from ..policy import create_policy
from ..policy.distributed import (
    RANK_SECRET_ENV,
    authenticate_group,
    broadcast_bytes,
    broadcast_state,
    destroy_group,
    group_secret,
    join_group,
    open_store,
)
from ..storage import SharedStorage
from .learner import create_learner, store_saving
from .pipeline import RowStore
from .shell import LearnerSlave
from ..slave.slave import SlaveTask

logger = logging.getLogger(__name__)

# where rank 0 trains ("cpu" or "cuda"): ranks must pick the same process-group backend before they get
# the config
RANK_DEVICE_ENV = "PARALLEL_RL_RANK_DEVICE"
# what a rank started here inherits of rank 0's environment (names, or prefixes ending in "_"): what Python,
# torch, its devices and the shared store's client need; never the cluster token or other secrets of ours
# (a rank talks to no coordinator: it gets the group's secret, derived from the token, to prove it is a rank)
RANK_ENV_NAMES = (
    "PATH",
    "HOME",
    "USER",
    "LOGNAME",
    "LANG",
    "LANGUAGE",
    "TZ",
    "TMPDIR",
    "TEMP",
    "TMP",
    "SHELL",
    "LD_LIBRARY_PATH",
    "LD_PRELOAD",
    "VIRTUAL_ENV",
    "CONDA_PREFIX",
    "SSL_CERT_FILE",
    "SSL_CERT_DIR",
    "REQUESTS_CA_BUNDLE",
    "CURL_CA_BUNDLE",
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "NO_PROXY",
    "http_proxy",
    "https_proxy",
    "no_proxy",
    "LOCAL_RANK",
)
RANK_ENV_PREFIXES = (
    "LC_",
    "PYTHON",
    "CUDA_",
    "NVIDIA_",
    "NCCL_",
    "GLOO_",
    "TORCH_",
    "OMP_",
    "MKL_",
    "KMP_",
    "OPENBLAS_",
    "AWS_",
    "FSSPEC_",
    "GOOGLE_",
    "GCE_",
    "AZURE_",
)


def rank_environment(environ, **extra: str) -> Dict[str, str]:
    """The environment of a rank process started by rank 0: the allowed part of ``environ`` and ``extra``."""
    env = {k: v for k, v in environ.items() if k in RANK_ENV_NAMES or k.startswith(RANK_ENV_PREFIXES)}
    env.update(extra)
    return env


class RankState(str, Enum):
    STARTING = "starting"
    RUNNING = "running"
    LOST = "lost"
    STOPPED = "stopped"


class Op(IntEnum):
    """What rank 0 tells the group before each step."""

    STOP = 0
    TRAIN = 1
    NOOP = 2  # no batch for a while: keeps the waiting ranks within the collective timeout


@dataclass
class Rank:
    rank: int
    pid: Optional[int]
    state: RankState = RankState.STARTING
    proc: Optional[subprocess.Popen] = field(default=None, repr=False)

    def to_dict(self) -> Dict[str, Any]:
        return {"rank": self.rank, "pid": self.pid, "state": self.state.value}


def share_bounds(rank: int, size: int, n: int) -> tuple:
    """Rows ``[start, end)`` of an ``n``-row batch that rank ``rank`` of ``size`` trains on."""
    return rank * n // size, (rank + 1) * n // size


class GroupStep:
    """One rank's side of a training step: the references, its share of rows, priorities and info back.

    Every rank runs the same five collectives in the same order (each is a point where every rank waits for
    the slowest, so there are as few as the step needs): a header (op, rows, whether to merge learn info,
    bytes of chunk names); one payload with the batch's row references, weights and chunk names; the
    smallest share any rank could read (all skip a batch of which some rank found no rows: an empty share
    cannot join the gradient average); the update itself (gradients averaged in the optimizer); and a
    gather to rank 0 of every share's priorities, with the rank's learn info when asked (rank 0 averages
    it). What each rank can work out itself (its share, the rows' positions) never travels."""

    def __init__(
        self, learner, storage: SharedStorage, rank: int, size: int, cache_slots: int, chunk_rows: int, on_damaged=None
    ):
        self.learner, self.rank, self.size = learner, rank, size
        # a damaged chunk's rows are dropped; rank 0 tells the coordinator (the others only log it)
        self._rows = RowStore(storage, cache_slots, chunk_rows, on_damaged)
        self.merged_info: Dict[str, float] = {}

    def send(
        self, op: Op, refs: Optional[Dict[str, np.ndarray]] = None, merge_info: bool = False
    ) -> Optional[np.ndarray]:
        """Rank 0: broadcast ``op`` (and a batch of references) and take part in the step."""
        if op != Op.TRAIN:
            dist.broadcast(torch.tensor([int(op), 0, 0, 0], dtype=torch.int64), 0)
            return None
        names, local = np.unique(refs["chunk"], return_inverse=True)
        name_bytes = np.frombuffer("\n".join(names.tolist()).encode(), dtype=np.uint8)
        n = len(refs["row"])
        dist.broadcast(torch.tensor([int(op), n, int(merge_info), len(name_bytes)], dtype=torch.int64), 0)
        rows = refs["row"].astype(np.int64)
        weight = np.ascontiguousarray(refs["weight"], dtype=np.float32)
        payload = np.concatenate(
            [local.astype(np.int64).view(np.uint8), rows.view(np.uint8), weight.view(np.uint8), name_bytes]
        )
        dist.broadcast(torch.from_numpy(payload), 0)
        return self._train(names.tolist(), local, rows, weight, merge_info)

    def receive(self) -> Op:
        """Ranks 1..N-1: take part in the step rank 0 announces; returns its op."""
        header = torch.zeros(4, dtype=torch.int64)
        dist.broadcast(header, 0)
        op, n, merge_info, name_bytes = (int(v) for v in header)
        if op != Op.TRAIN:
            return Op(op)
        payload = torch.empty(20 * n + name_bytes, dtype=torch.uint8)
        dist.broadcast(payload, 0)
        raw = payload.numpy()
        local, rows = raw[: 8 * n].view(np.int64), raw[8 * n : 16 * n].view(np.int64)
        weight = raw[16 * n : 20 * n].view(np.float32)
        self._train(raw[20 * n :].tobytes().decode().split("\n"), local, rows, weight, bool(merge_info))
        return Op.TRAIN

    def _train(
        self, names: List[str], local: np.ndarray, rows: np.ndarray, weight: np.ndarray, merge_info: bool
    ) -> Optional[np.ndarray]:
        n = len(rows)
        bounds = [share_bounds(r, self.size, n) for r in range(self.size)]
        start, end = bounds[self.rank]
        share_local = local[start:end]
        used = np.unique(share_local)  # only the chunks this share touches are read
        batch, keep = self._rows.gather([names[i] for i in used], np.searchsorted(used, share_local), rows[start:end])
        kept = torch.tensor([int(keep.sum())], dtype=torch.int64)
        dist.all_reduce(kept, op=dist.ReduceOp.MIN)
        if int(kept.item()) == 0:  # some rank has no rows left of this batch (its chunks were evicted)
            return np.full(n, np.nan, dtype=np.float32)
        position = np.arange(start, end)[keep]
        batch.update(weight=weight[start:end][keep], index=position, uid=position)
        self.learner.train(batch)
        # one gather to rank 0: this share's priorities (NaN where none), then the learn info when asked
        longest = max(e - s for s, e in bounds)
        info_names = (
            sorted(
                k
                for k, v in self.learner.learn_info.items()
                if isinstance(v, (int, float)) and k not in ("train_iter", "envstep")
            )
            if merge_info
            else []
        )
        mine = torch.full((longest + len(info_names),), float("nan"), dtype=torch.float64)
        info = self.learner.priority_info
        if info is not None:
            mine[torch.as_tensor(info["index"] - start)] = torch.as_tensor(info["priority"], dtype=torch.float64)
        if info_names:
            mine[longest:] = torch.tensor([float(self.learner.learn_info[k]) for k in info_names], dtype=torch.float64)
        gathered = [torch.empty_like(mine) for _ in range(self.size)] if self.rank == 0 else None
        dist.gather(mine, gathered, dst=0)
        if gathered is None:
            return None
        if info_names:
            self.merged_info = mean_learn_info([dict(zip(info_names, g[longest:].tolist())) for g in gathered])
        return np.concatenate([g[: e - s].numpy() for g, (s, e) in zip(gathered, bounds)]).astype(np.float32)


def mean_learn_info(info: List[Dict[str, float]]) -> Dict[str, float]:
    """The ranks' learn info as one (DI-engine's ``LearnerAggregator.merge_info``): the mean of each number.
    Priorities are not merged here: each rank's go back to their own rows."""
    return {k: float(np.mean([i[k] for i in info])) for k in info[0]} if info else {}


def wait_for_any_exit(procs: List[subprocess.Popen], timeout: float) -> None:
    """Until one of ``procs`` has exited (or ``timeout``): a pidfd per process, one ``select`` on them all."""
    fds = []
    try:
        for proc in procs:
            if proc.poll() is not None:
                return
            fds.append(os.pidfd_open(proc.pid))
        if fds:
            select.select(fds, [], [], timeout)
    except (OSError, AttributeError):  # no pidfd (not Linux >= 5.3): report what is known now
        return
    finally:
        for fd in fds:
            os.close(fd)


def _spaces(cfg: EasyDict):
    obs_shape, action_spec = env_spaces(cfg.env, cfg.policy.type)
    return int(np.prod(obs_shape)), action_spec


class LearnerAggregator(LearnerSlave):
    """The learner worker the coordinator sees; with ``world_size`` N > 1, rank 0 of N learner ranks."""

    merge_info = staticmethod(mean_learn_info)  # DI-engine's name for what merges the ranks' learn info

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.ranks: List[Rank] = []
        self.rank_restarts = 0
        self._step: Optional[GroupStep] = None
        self._group_failed = False  # a collective failed: the group is broken, nothing more goes through it
        self._last_collective = time.monotonic()
        self._last_merge = 0.0

    @property
    def world_size(self) -> int:
        return int(self.cfg.parallel.learner.world_size) if self.cfg is not None else 1

    @property
    def loads_rows(self) -> bool:  # type: ignore[override]
        return self.world_size == 1

    def heartbeat_body(self) -> Dict[str, Any]:
        body = super().heartbeat_body()
        if self.world_size > 1:
            body["ranks"] = self.rank_list()
        return body

    def rank_list(self) -> List[Dict[str, Any]]:
        """Every rank: ``rank``, ``pid`` (on its own host; None for a rank started elsewhere), ``state``."""
        for r in self.ranks:
            if r.proc is not None and r.state in (RankState.STARTING, RankState.RUNNING) and r.proc.poll() is not None:
                r.state = RankState.LOST
        return [r.to_dict() for r in self.ranks]

    # ---- the task: restart the group when a rank is lost --------------------------------------------
    def execute(self, task: SlaveTask) -> Dict[str, Any]:
        if self.world_size == 1:
            return super().execute(task)
        resume, restarts = bool(task.spec.get("resume")), 0
        max_restarts = int(self.cfg.parallel.learner.max_rank_restarts)
        while True:
            try:
                result = self.run_training(task, resume=resume)
                result["rank_restarts"] = restarts
                return result
            except LearnerRankLostError as exc:
                restarts += 1
                self.rank_restarts += 1
                if restarts > max_restarts or task.stop.is_set():
                    raise LearnerRankLostError(
                        f"{exc}; gave up after {restarts - 1} group restart(s) "
                        f"(parallel.learner.max_rank_restarts={max_restarts})"
                    ) from exc
                self.report_problem(
                    f"{exc}; restarting the group of {self.world_size} ranks from the last "
                    f"learner state (restart {restarts} of {max_restarts})"
                )
                logger.warning(
                    "learner %s: %s; restarting the group (%d/%d)", self.worker_id, exc, restarts, max_restarts
                )
                resume = True

    # ---- hooks of LearnerSlave.run_training ---------------------------------------------------
    def start_training(self, policy, learner) -> None:
        if self.world_size == 1:
            return
        lcfg = self.cfg.parallel.learner
        size, timeout = self.world_size, float(lcfg.collective_timeout)
        self._group_failed = False
        store = open_store(0, lcfg.master_addr, int(lcfg.master_port), timeout)
        self.ranks = [Rank(0, os.getpid(), RankState.RUNNING)]
        self.ranks += [Rank(r, None) for r in range(1, size)]
        if lcfg.spawn_ranks:
            for r in self.ranks[1:]:
                r.proc = self._spawn_rank(r.rank, size, lcfg.master_addr, store.port, timeout, policy.device)
                r.pid = r.proc.pid
        try:
            join_group(store, 0, size, timeout, policy.device)
            authenticate_group(group_secret(self.token), 0, size)  # before the config goes to anyone
            broadcast_bytes(json.dumps({"config": self.cfg, "shared_dir": self.storage.root}).encode())
            broadcast_state({"policy": policy.state_dict(), "train_iter": learner.train_iter})
        except RuntimeError as exc:  # a rank never joined, or died while starting
            lost = self._rank_lost(exc)
            self._stop_ranks()
            raise LearnerRankLostError(
                f"the group of {size} learner ranks did not form within {timeout:g}s: {lost}"
            ) from exc
        for r in self.ranks:
            r.state = RankState.RUNNING
        learner.rank, learner.world_size = 0, size
        self._step = GroupStep(
            learner,
            self.storage,
            0,
            size,
            int(lcfg.chunk_cache_size),
            int(self.cfg.parallel.collector.chunk_size),
            on_damaged=self.report_damaged_chunk,
        )
        self._last_collective = time.monotonic()
        logger.info(
            "learner %s: %d ranks train as one (%s)",
            self.worker_id,
            size,
            ", ".join(f"rank {r.rank} pid {r.pid}" for r in self.ranks),
        )

    def _spawn_rank(self, rank: int, size: int, addr: str, port: int, timeout: float, device: str) -> subprocess.Popen:
        secret = group_secret(self.token)
        env = rank_environment(
            os.environ,
            MASTER_ADDR=addr,
            MASTER_PORT=str(port),
            RANK=str(rank),
            WORLD_SIZE=str(size),
            PARALLEL_RL_PARENT_PID=str(os.getpid()),
            **{RANK_DEVICE_ENV: device},
            **({RANK_SECRET_ENV: secret.hex()} if secret else {}),
        )
        cmd = [sys.executable, "-m", "parallel_rl", "learner-rank", "--timeout", str(timeout)]
        return subprocess.Popen(cmd, env=env, stdin=subprocess.DEVNULL)

    def train_step(self, learner, batch: Dict[str, np.ndarray]) -> None:
        if self._step is None:
            return super().train_step(learner, batch)
        now = time.monotonic()
        merge = now - self._last_merge >= 0.2
        try:
            priority = self._step.send(Op.TRAIN, batch, merge_info=merge)
        except RuntimeError as exc:  # gloo: a peer closed its connection, or the collective timed out
            raise self._rank_lost(exc) from exc
        self._last_collective = time.monotonic()
        if merge:
            self._last_merge = now
        ok = ~np.isnan(priority)
        learner.priority_info = (
            {"index": batch["index"][ok], "uid": batch["uid"][ok], "priority": priority[ok]} if ok.any() else None
        )

    def get_data(self, pipeline, timeout: float):
        batch = super().get_data(pipeline, timeout)
        if batch is None and self._step is not None:
            # the ranks wait in a collective for the next step: let them know we are here
            if time.monotonic() - self._last_collective > float(self.cfg.parallel.learner.collective_timeout) / 4:
                try:
                    self._step.send(Op.NOOP)
                except RuntimeError as exc:
                    raise self._rank_lost(exc) from exc
                self._last_collective = time.monotonic()
        return batch

    def send_learn_info(self, task, learner, pipeline, rate: float = 0.0) -> None:
        if self._step is not None and self._step.merged_info:
            learner.learn_info.update(self._step.merged_info)  # the ranks' mean, not rank 0's alone
        learner.learn_info["world_size"] = self.world_size
        learner.learn_info["rank_restarts"] = self.rank_restarts
        super().send_learn_info(task, learner, pipeline, rate)

    def stop_training(self) -> None:
        if self._step is None:
            return
        step, self._step = self._step, None
        graceful = not self._group_failed
        if graceful:
            try:
                step.send(Op.STOP)
            except RuntimeError as exc:
                logger.warning("learner %s: could not tell the ranks to stop: %s", self.worker_id, exc)
                graceful = False
        self._stop_ranks(graceful)

    def _rank_lost(self, exc: Exception) -> LearnerRankLostError:
        """The error for a failed collective, naming the rank that died (given 2 s to be seen exiting)."""
        self._group_failed = True
        wait_for_any_exit([r.proc for r in self.ranks if r.proc is not None], timeout=2.0)
        return LearnerRankLostError(
            f"{self._lost_ranks() or 'a learner rank failed'} ({type(exc).__name__}: {str(exc)[:160]})"
        )

    def _lost_ranks(self) -> str:
        """Which ranks are gone, as one line ("" when none is known to be)."""
        self.rank_list()
        return "; ".join(
            f"learner rank {r.rank} (pid {r.pid}) exited with {r.proc.returncode}"
            for r in self.ranks
            if r.state == RankState.LOST and r.proc is not None
        )

    def _stop_ranks(self, graceful: bool = False) -> None:
        """Leave the process group; the spawned ranks get 10 s to exit after STOP (``graceful``, else SIGTERM
        at once: after a failure they may wait in a broken collective), then SIGKILL."""
        self.rank_list()  # the ones already gone are lost; the others are stopped here
        deadline = time.monotonic() + 10.0
        for r in self.ranks[1:]:
            if r.proc is None:
                continue
            if not graceful and r.proc.poll() is None:
                r.proc.terminate()
            try:
                r.proc.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                logger.warning("learner %s: rank %d (pid %d) did not exit; killing it", self.worker_id, r.rank, r.pid)
                r.proc.kill()
                r.proc.wait(5.0)
            if r.state != RankState.LOST:
                r.state = RankState.STOPPED
        self.ranks[0].state = RankState.STOPPED
        destroy_group()


# ---- ranks 1..N-1 -------------------------------------------------------------------------------------
def run_rank(
    rank: int, size: int, master_addr: str, master_port: int, timeout: float, shared_dir: Optional[str] = None
) -> int:
    """A learner rank: join rank 0's group, train on its share of every batch until told to stop."""
    from ..runtime import set_torch_threads, setup_logging

    store = open_store(rank, master_addr, master_port, timeout)
    join_group(store, rank, size, timeout, os.environ.get(RANK_DEVICE_ENV, "cpu"))
    try:
        authenticate_group(rank_secret(), rank, size)  # nothing taken from a group we cannot trust
        setup = json.loads(broadcast_bytes(None).decode())
        cfg = EasyDict(setup["config"])
        setup_logging(cfg.system.log_level)
        set_torch_threads(cfg.system.torch_num_threads)
        if os.environ.get(RANK_DEVICE_ENV) == "cuda":  # one GPU per rank on a host
            torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", rank)) % torch.cuda.device_count())
        obs_dim, action_spec = _spaces(cfg)
        policy = create_policy(cfg.policy, obs_dim, action_spec, seed=cfg.seed)
        learner = create_learner(
            store_saving(cfg.policy.learn.learner),
            policy.learn_mode,
            exp_dir=None,
            instance_name=f"learner rank {rank}",
        )
        state = broadcast_state({"policy": policy.state_dict(), "train_iter": 0})
        policy.load_state_dict(state["policy"])
        learner.train_iter = int(state["train_iter"])
        learner.rank, learner.world_size = rank, size
        step = GroupStep(
            learner,
            SharedStorage(shared_dir or setup["shared_dir"]),
            rank,
            size,
            int(cfg.parallel.learner.chunk_cache_size),
            int(cfg.parallel.collector.chunk_size),
        )
        logger.info("learner rank %d/%d: ready at iteration %d", rank, size, learner.train_iter)
        while step.receive() != Op.STOP:
            pass
        logger.info("learner rank %d/%d: stopped at iteration %d", rank, size, learner.train_iter)
        return 0
    finally:
        destroy_group()


def rank_secret() -> Optional[bytes]:
    """This rank's proof material: ``PARALLEL_RL_RANK_SECRET`` (hex; rank 0 gives it to the ranks it starts), else
    derived from ``PARALLEL_RL_TOKEN`` (ranks started elsewhere, e.g. by docker compose, with the cluster token)."""
    from ..transport import TOKEN_ENV

    given = os.environ.get(RANK_SECRET_ENV)
    if given:
        try:
            return bytes.fromhex(given)
        except ValueError:
            raise ConfigError(
                f"{RANK_SECRET_ENV} must be hex (as rank 0 passes it), got {len(given)} other characters"
            ) from None
    return group_secret(os.environ.get(TOKEN_ENV))


def cmd_learner_rank(args: argparse.Namespace) -> int:
    """``parallel-rl learner-rank``: rank ``$RANK`` of ``$WORLD_SIZE``, joining ``$MASTER_ADDR:$MASTER_PORT``."""
    from ..runtime import die_with_parent, setup_logging

    die_with_parent()
    setup_logging("INFO")
    missing = [k for k in ("MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE") if not os.environ.get(k)]
    if missing:
        raise ConfigError(
            f"learner-rank needs {', '.join(missing)} in its environment (the address and port "
            f"of rank 0's parallel.learner.master_addr/master_port, this rank, the world size)"
        )
    rank, size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    if not 1 <= rank < size:
        raise ConfigError(
            f"learner-rank: RANK must be in 1..WORLD_SIZE-1 (rank 0 is the learner worker), got {rank=} {size=}"
        )
    addr, port = os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"])
    if not args.rejoin:
        return run_rank(rank, size, addr, port, args.timeout, args.shared_dir)
    while True:  # a rank started on its own host: after each group (a task, or one restart of it), join the next
        try:
            run_rank(rank, size, addr, port, args.timeout, args.shared_dir)
        except RuntimeError as exc:  # rank 0 gone, not up yet, or the group broke: the store connect waits again
            logger.warning(
                "learner rank %d/%d: the group at %s:%d ended: %s; joining again",
                rank,
                size,
                addr,
                port,
                str(exc)[:200],
            )
