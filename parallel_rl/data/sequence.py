"""Buffers of episodes: contiguous same-episode sequences of rows (:class:`SequenceReplayBuffer`), and whole
episodes (:class:`EpisodeReplayBuffer`); R2D2's replay sequences, built as they are collected
(:class:`SequenceBuilder`)."""

from __future__ import annotations

import dataclasses
from typing import Callable, Dict, List, Mapping, Optional

import numpy as np

from ..config.section import setting
from .base import BufferStats, IBuffer, NaiveBufferSection, NaiveReplayBuffer
from .columns import Columns, columns_len


@dataclasses.dataclass(frozen=True)
class SequenceBufferSection(NaiveBufferSection):
    """Contiguous same-episode sequences of rows, for library use (the pipelines train on transitions)."""

    title = "Replay buffer (type='sequence')"

    type: str = setting("sequence", doc="same-episode sequences (see naive's type for the others)")


@dataclasses.dataclass(frozen=True)
class EpisodeBufferSection(NaiveBufferSection):
    """Whole episodes, sampled uniformly."""

    title = "Replay buffer (type='episode')"

    type: str = setting("episode", doc="whole episodes (see naive's type for the others)")
    replay_buffer_size: int = setting(1000, lo=1, doc="episodes the buffer holds; a full buffer drops its oldest")


class SequenceReplayBuffer(NaiveReplayBuffer):
    """DI-engine's ``SequenceReplayBuffer``: samples contiguous, same-episode sequences of rows.

    The rows live in the naive buffer's ring; the buffer also keeps which episode each row belongs
    to. ``push`` takes rows of one env in time order (a dict of columns) or a list of whole
    episodes (dicts of columns, e.g. from ``EpisodeSerialCollector``). In a dict of rows, an
    ``episode_id`` column, when there is one, names each row's episode; otherwise an episode ends
    after a row whose ``done`` (or ``end``, where present) is true, and the first rows of a push
    continue the episode the previous push left open. (``done`` is false on a time-limit
    truncation: push a list of episodes, or an ``end`` column, to split those.)
    """

    section = SequenceBufferSection

    def __init__(
        self,
        cfg: Optional[Mapping] = None,
        tb_logger=None,
        exp_name: str = "default_experiment",
        instance_name: str = "buffer",
        on_evict: Optional[Callable[[Columns], None]] = None,
    ):
        super().__init__(cfg, tb_logger, exp_name, instance_name, on_evict)
        self._episode = np.full(self.capacity, -1, dtype=np.int64)
        self._episodes_begun = 0  # episode ids handed out
        self._open = False  # the last pushed row's episode has not ended

    def _episode_ids(self, data: Mapping[str, np.ndarray], n: int) -> np.ndarray:
        if "episode_id" in data:  # the caller's ids, renumbered in order of appearance
            raw = np.asarray(data["episode_id"])
            starts = np.concatenate([[True], raw[1:] != raw[:-1]])
            continues = False
        else:
            ends = np.asarray(data["done"], dtype=bool) if "done" in data else np.zeros(n, dtype=bool)
            if "end" in data:
                ends = ends | np.asarray(data["end"], dtype=bool)
            starts = np.concatenate([[True], ends[:-1]])
            continues = self._open
            self._open = not bool(ends[-1])
        ids = self._episodes_begun + np.cumsum(starts) - 1
        if continues:
            ids -= 1
        self._episodes_begun = int(ids[-1]) + 1
        return ids

    def push(self, data, cur_collector_envstep: int = -1) -> np.ndarray:
        """Push rows of one env in time order (dict of columns) or a list of whole episodes."""
        if not isinstance(data, Mapping):  # a list of episodes: each its own episode
            episodes = [{k: np.asarray(v) for k, v in e.items()} for e in data if columns_len(e)]
            if not episodes:
                return np.zeros(0, dtype=np.int64)
            with self._lock:
                ids = np.concatenate(
                    [np.full(columns_len(e), self._episodes_begun + i, dtype=np.int64) for i, e in enumerate(episodes)]
                )
                self._episodes_begun += len(episodes)
                self._open = False
                return self._push_rows(
                    {k: np.concatenate([e[k] for e in episodes]) for k in episodes[0]}, ids, cur_collector_envstep
                )
        n = columns_len(data)
        if n == 0:
            return np.zeros(0, dtype=np.int64)
        with self._lock:
            ids = self._episode_ids(data, n)
            return self._push_rows({k: v for k, v in data.items() if k != "episode_id"}, ids, cur_collector_envstep)

    def _push_rows(self, data: Mapping[str, np.ndarray], ids: np.ndarray, cur_collector_envstep: int) -> np.ndarray:
        slots = super().push(data, cur_collector_envstep)
        self._episode[slots] = ids[len(ids) - len(slots) :]
        return slots

    def sample(
        self,
        batch: int,
        sequence: int,
        cur_learner_iter: int = 0,
        sample_range: Optional[slice] = None,
        replace: bool = False,
        cross_episode: bool = False,
    ) -> Optional[Columns]:
        """``batch`` sequences of ``sequence`` consecutive rows; None while fewer can be drawn.

        Every column comes back shaped ``(batch, sequence, ...)`` (``index`` / ``uid`` too), rows of
        a sequence in time order. A sequence never crosses an episode boundary unless
        ``cross_episode=True`` (then any ``sequence`` consecutive stored rows). ``replace=False``
        (DI-engine's default): distinct start rows (sequences may overlap). ``sample_range``: a
        slice over the stored rows oldest first; sequences lie inside it.
        """
        if batch <= 0 or sequence <= 0:
            raise ValueError(f"{batch=} and {sequence=} must be > 0")
        with self._lock:
            pool = np.flatnonzero(self._valid)
            pool = pool[np.argsort(self._uid[pool], kind="stable")]  # oldest first
            if sample_range is not None:
                pool = pool[sample_range]
            if len(pool) < sequence:
                return None
            last = len(pool) - sequence  # start positions 0..last
            uid, episode = self._uid[pool], self._episode[pool]
            ok = uid[sequence - 1 :] - uid[: last + 1] == sequence - 1  # no gap in push order
            if not cross_episode:  # an episode's rows are consecutive: same id at both ends, same id inside
                ok &= episode[sequence - 1 :] == episode[: last + 1]
            starts = np.flatnonzero(ok)
            if len(starts) == 0 or (not replace and len(starts) < batch):
                return None
            picks = starts[self._draw(len(starts), batch, replace)]
            slots = pool[picks[:, None] + np.arange(sequence)]
            out = self._gather(slots.reshape(-1), cur_learner_iter)
            out.pop("replay_buffer_idx"), out.pop("replay_unique_id")
            out = {k: v.reshape((batch, sequence) + v.shape[1:]) for k, v in out.items()}
            out["replay_buffer_idx"], out["replay_unique_id"] = out["index"], out["uid"]
            return out

    def state_dict(self) -> Dict[str, np.ndarray]:
        with self._lock:
            state = super().state_dict()
            state["sequence/episode"] = self._episode.copy()
            state["sequence/scalars"] = np.array([self._episodes_begun, self._open], dtype=np.int64)
            return state

    def load_state_dict(self, _state_dict: Mapping[str, np.ndarray]) -> None:
        with self._lock:
            super().load_state_dict(_state_dict)
            self._episode = np.array(_state_dict["sequence/episode"])
            self._episodes_begun, self._open = (
                int(_state_dict["sequence/scalars"][0]),
                bool(_state_dict["sequence/scalars"][1]),
            )


class EpisodeReplayBuffer(IBuffer):
    """Whole episodes (dicts of columns), sampled uniformly; capacity counts episodes."""

    section = EpisodeBufferSection

    def __init__(
        self,
        cfg: Optional[Mapping] = None,
        tb_logger=None,
        exp_name: str = "default_experiment",
        instance_name: str = "buffer",
        on_evict: Optional[Callable[[Columns], None]] = None,
    ):
        self._setup(cfg, on_evict, tb_logger, exp_name, instance_name)
        self._episodes: List[Columns] = []
        self._next = 0
        self.pushed = self.sampled = self.evicted = 0

    def push(self, data, cur_collector_envstep: int = -1) -> np.ndarray:
        """Push one episode (dict of columns) or a list of them."""
        episodes = [data] if isinstance(data, Mapping) else list(data)
        slots = []
        with self._lock:
            for episode in episodes:
                episode = {k: np.asarray(v) for k, v in episode.items()}
                if len(self._episodes) < self.capacity:
                    self._episodes.append(episode)
                    slots.append(len(self._episodes) - 1)
                else:
                    old = self._episodes[self._next]
                    self._episodes[self._next] = episode
                    self.evicted += 1
                    if self.on_evict is not None:
                        self.on_evict(old)
                    slots.append(self._next)
                    self._next = (self._next + 1) % self.capacity
                self.pushed += 1
        return np.asarray(slots, dtype=np.int64)

    def sample(
        self, size: int, cur_learner_iter: int = 0, sample_range: Optional[slice] = None, replace: bool = False
    ) -> Optional[List[Columns]]:
        """``size`` whole episodes, distinct unless ``replace``; ``sample_range`` is not supported here."""
        if sample_range is not None:
            raise ValueError(f"{sample_range=}: the episode buffer samples from all its episodes")
        with self._lock:
            if len(self._episodes) < size or size <= 0:
                return None
            picks = self._draw(len(self._episodes), size, replace)
            self.sampled += size
            return [self._episodes[i] for i in picks]

    def count(self) -> int:
        return len(self._episodes)

    @property
    def episode_len(self) -> List[int]:
        """DI-engine's: the length of every stored episode."""
        with self._lock:
            return [len(next(iter(e.values()))) if e else 0 for e in self._episodes]

    def clear(self) -> None:
        with self._lock:
            self.evicted += len(self._episodes)
            self._episodes, self._next = [], 0

    def stats(self) -> BufferStats:
        return BufferStats(len(self._episodes), self.capacity, self.pushed, self.sampled, self.evicted, 0.0)

    def state_dict(self) -> Dict[str, np.ndarray]:
        with self._lock:
            state: Dict[str, np.ndarray] = {
                "counters": np.array([self._next, self.pushed, self.sampled, self.evicted], dtype=np.int64),
                "lengths": np.array([len(next(iter(e.values()))) if e else 0 for e in self._episodes], dtype=np.int64),
            }
            if self._episodes:
                for name in self._episodes[0]:
                    state[f"col/{name}"] = np.concatenate([e[name] for e in self._episodes])
            return state

    def load_state_dict(self, _state_dict: Mapping[str, np.ndarray]) -> None:
        with self._lock:
            self._next, self.pushed, self.sampled, self.evicted = (int(x) for x in _state_dict["counters"])
            bounds = np.cumsum(np.concatenate([[0], _state_dict["lengths"]]))
            names = [k[4:] for k in _state_dict if k.startswith("col/")]
            self._episodes = [
                {name: np.array(_state_dict[f"col/{name}"][a:b]) for name in names}
                for a, b in zip(bounds[:-1], bounds[1:])
            ]


# the columns of one R2D2 sequence built from a lane's rows (each (L, ...)); the rows' state columns give the
# sequence's starting state (each (H,)), ``collect_iter`` is its newest row's
SEQUENCE_COLUMNS = ("obs", "action", "reward", "done", "end")


class SequenceBuilder:
    """R2D2's replay sequences (Kapturowski et al. 2019), built by the collectors from the steps of each env lane.

    Each lane's 1-step rows (time order, across collect calls, chunks and episodes) are cut into sequences of
    ``burnin + unroll + tail`` rows, one every ``unroll`` rows: every row is trained on (in the ``unroll`` part)
    by exactly one sequence, after ``burnin`` rows that only refresh the recurrent state and before ``tail``
    rows (``nstep``) that only give its n-step targets. A sequence is one replay row: its columns are
    :data:`SEQUENCE_COLUMNS` shaped ``(L, ...)`` (``done``: terminated at that row, ``end``: terminated or
    truncated) and the state its first row was acted with (``hidden_h``, ``hidden_c``: the collector's, see
    :mod:`parallel_rl.policy.memory`), so a sequence is also the unit of priority, in the serial buffer and
    in the coordinator's replay index alike. Episodes may begin inside a sequence (the row after an ``end``
    row): the learner zeroes the state there, as the collector did. A lane's first sequence begins with
    ``burnin`` padding rows (an ``end`` each: its first real row starts afresh).

    It answers the collector's calls in place of the n-step builder (``add``, ``enough_after``, ``build``);
    ``build`` returns sequences. Auto-reset steps (not ``valid``) make no row.
    """

    def __init__(self, num_envs: int, burnin: int, unroll: int, tail: int):
        if burnin < 0 or unroll <= 0 or tail < 0:
            raise ValueError(
                f"sequences need burnin_step >= 0, unroll_len > 0 and nstep >= 0, got {burnin=} {unroll=} {tail=}"
            )
        self.num_envs = num_envs
        self.burnin, self.unroll, self.length = burnin, unroll, burnin + unroll + tail
        self.clear()

    def clear(self) -> None:
        self._steps: List[Columns] = []  # the vector steps since the last build, each (E, ...)
        self._held: List[Optional[Columns]] = [None] * self.num_envs  # each lane's rows not yet cut off
        self._new = np.zeros(self.num_envs, dtype=np.int64)  # each lane's valid steps since the last build

    def add(self, obs: np.ndarray, action: np.ndarray, step, extra: Optional[Columns] = None) -> None:
        state = {k: v for k, v in (extra or {}).items() if k.startswith("hidden_")}
        if not state:
            raise ValueError(
                "R2D2 sequences are cut from rows that carry the collector's state (hidden_h): the "
                "policy must have a recurrent core (policy.model.recurrent)"
            )
        self._steps.append(
            {
                "obs": obs,
                "action": np.asarray(action).astype(np.int64),
                "reward": step.reward,
                "done": step.terminated,
                "end": step.terminated | step.truncated,
                "valid": step.valid,
                **state,
            }
        )
        self._new += np.asarray(step.valid, dtype=bool)

    def enough_after(self, missing: int, lanes: int):
        """Whether the steps added so far complete ``missing`` sequences (the collector's count of steps is not
        needed: the builder counts each lane's own)."""
        held = np.array([self.burnin if h is None else len(h["action"]) for h in self._held], dtype=np.int64)

        def enough(steps: int) -> bool:
            have = held + self._new
            return int(np.where(have >= self.length, (have - self.length) // self.unroll + 1, 0).sum()) >= missing

        return enough

    def _pad(self, row: Columns) -> Columns:
        """``burnin`` rows before a lane's first row: zeros, each an episode's end (the real rows start afresh)."""
        pad = {k: np.zeros((self.burnin,) + v.shape[1:], dtype=v.dtype) for k, v in row.items()}
        pad["end"][:] = True
        return pad

    def build(self, collect_iter: int) -> Columns:
        """Every sequence complete now, as columns (one row per sequence)."""
        if not self._steps:
            return {}
        steps = {k: np.array([s[k] for s in self._steps]) for k in self._steps[0]}  # (T, E, ...)
        self._steps, self._new[:] = [], 0
        valid = steps.pop("valid").astype(bool)
        pieces = []
        for lane in range(self.num_envs):
            new = {k: v[valid[:, lane], lane] for k, v in steps.items()}
            new["reward"] = new["reward"].astype(np.float32)
            new["collect_iter"] = np.full(len(new["action"]), collect_iter, dtype=np.int64)
            held = self._held[lane]
            if held is None:
                held = self._pad(new)
            held = {k: np.concatenate([held[k], new[k]]) for k in held}
            count = (len(held["action"]) - self.length) // self.unroll + 1
            if count > 0:
                first = np.arange(count) * self.unroll
                window = first[:, None] + np.arange(self.length)
                piece = {k: held[k][window] for k in SEQUENCE_COLUMNS}
                piece.update({k: held[k][first] for k in held if k.startswith("hidden_")})
                piece["collect_iter"] = held["collect_iter"][window[:, -1]]
                pieces.append(piece)
                held = {k: v[count * self.unroll :] for k, v in held.items()}
            self._held[lane] = held
        if not pieces:
            return {}
        return {k: np.concatenate([p[k] for p in pieces]) for k in pieces[0]}
