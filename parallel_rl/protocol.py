"""The wire protocol between the coordinator and its workers, as dataclasses: one source for the senders, the
coordinator's checks, the OpenAPI document (``coordinator_app/openapi.py``) and ``docs/protocol.md``.

A worker builds a message and sends ``msg.to_json()``; the coordinator reads it with ``Cls.from_json(obj)``,
which checks everything that needs no state (types, ranges, finite numbers) and raises
:class:`~parallel_rl.errors.ProtocolViolation` naming the field. What needs the coordinator's state (the task
runs on the sender, the chunk is on the shared disk, the policy was published) is checked by its message table
(``parallel_rl/coordinator/messages.py``). Fields a reader does not know are ignored: a newer sender may add
some. Numbers keep their limits in the field's metadata (``lo``, ``hi``), where ``from_json`` reads them and
``coordinator_app/openapi.py`` makes each class's schema from its fields.

It stands on the floors below: the transport's codec (``field``/``number_field`` read the REST bodies with the
same words as every other view) and the store's ``check_health_report`` (a worker's report on the store).
"""
from __future__ import annotations

import dataclasses
import functools
import sys
from dataclasses import dataclass
from typing import Any, ClassVar, Dict, List, Optional, Tuple, Type

from .errors import ProtocolViolation
from .storage.health import check_health_report
from .transport.codec import field, number_field

# counters and versions beyond this are not ours (JSON numbers lose integer precision past 2**53)
MAX_COUNTER = 2**53
# env steps or rows one message may report
MAX_STEPS_PER_MESSAGE = 2**31 - 1
ROLES = ("collector", "learner")
# the numbers of one batch of references in a sample answer, and of a priority update
REFERENCE_KEYS = ("chunk", "row", "index", "uid", "weight")
PRIORITY_KEYS = ("index", "uid", "priority")
MAX_TASK_IDS = 1000  # tasks one heartbeat may name
MAX_RANKS = 1024  # learner ranks one heartbeat may list


def wire(*, lo: Optional[int] = None, hi: Optional[int] = None, doc: str = "", schema: Optional[dict] = None,
         **kw: Any) -> Any:
    """A dataclass field with its wire limits (``lo``/``hi`` for integers) and its OpenAPI description;
    ``schema`` where its type hint says too little (a reference to another schema of the document)."""
    return dataclasses.field(metadata={"lo": lo, "hi": hi, "doc": doc, "schema": schema}, **kw)


def _ref(name: str) -> Dict[str, str]:
    return {"$ref": f"#/components/schemas/{name}"}


# ---- checks shared by the messages -----------------------------------------------------------------------
def checked_int(msg: Dict[str, Any], name: str, lo: int, hi: Optional[int], default: Any = None) -> int:
    """``msg[name]`` as an int in ``[lo, hi]`` (no bools, no floats), or ProtocolViolation naming it."""
    value = msg.get(name, default)
    if value is None or isinstance(value, bool) or not isinstance(value, int):
        raise ProtocolViolation(f"field {name!r} must be an integer, got {value!r:.40}")
    if value < lo or (hi is not None and value > hi):
        raise ProtocolViolation(f"field {name!r} must be in [{lo}, {hi if hi is not None else 'inf'}], got {value}")
    return value


def finite_number(value: Any) -> bool:
    """Whether ``value`` is an int or a float that is finite as a float (an integer past float range is not:
    ``math.isfinite`` of it raises OverflowError)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and abs(value) <= sys.float_info.max


def check_eval_result(result: Dict[str, Any]) -> None:
    """An evaluator's result: ``eval_episode_return_mean`` a finite number or null (no episode finished),
    ``episodes`` an integer; ProtocolViolation naming the field otherwise."""
    mean = result.get("eval_episode_return_mean")
    if mean is not None and not finite_number(mean):
        raise ProtocolViolation(f"result field 'eval_episode_return_mean' must be a finite number or null, "
                                f"got {mean!r:.40}")
    checked_int(result, "episodes", 0, MAX_STEPS_PER_MESSAGE, default=0)


def _int(cls: type, obj: Dict[str, Any], name: str) -> int:
    """``obj[name]`` checked against the limits (and default) of ``cls``'s field ``name``."""
    return checked_int(obj, name, *_limits(cls, name))


@functools.lru_cache(maxsize=None)
def _limits(cls: type, name: str) -> Tuple[int, Optional[int], Any]:
    """``(lo, hi, default)`` of ``cls``'s integer field ``name`` (read once: messages are read by the thousand)."""
    f = cls.__dataclass_fields__[name]
    return f.metadata["lo"], f.metadata["hi"], f.default if f.default is not dataclasses.MISSING else None


def _string(obj: Dict[str, Any], name: str, optional: bool = False) -> Optional[str]:
    value = obj.get(name)
    if value is None and optional:
        return None
    if not isinstance(value, str):
        raise ProtocolViolation(f"field {name!r} must be a string, got {value!r:.40}")
    return value


def _json_fields(obj: Any) -> Dict[str, Any]:
    """A dataclass's fields as JSON values; optional fields that are None are left out (a reader's default)."""
    out = {}
    for name, optional in _wire_fields(type(obj)):
        value = getattr(obj, name)
        if value is None and optional:
            continue
        out[name] = value.to_json() if hasattr(value, "to_json") else value
    return out


@functools.lru_cache(maxsize=None)
def _wire_fields(cls: type) -> Tuple[Tuple[str, bool], ...]:
    """``(name, left out when None)`` of each field of ``cls`` (dataclasses.fields costs more than a message)."""
    return tuple((f.name, f.default is None) for f in dataclasses.fields(cls))


# ---- parts of messages ------------------------------------------------------------------------------------
@dataclass
class StorageReport:
    """The shared store as one process sees it (``StorageHealth.to_dict``): unhealthy from a failed read or write
    (disk full, I/O error, object store down) until a write succeeds again."""

    healthy: bool = wire(doc="false from a fault until a write succeeds")
    faults: int = wire(lo=0, hi=MAX_COUNTER - 1, doc="faults ever (a report with fewer is stale)")
    error: Optional[str] = wire(default=None, doc="the last fault (kept to 500 characters)")
    since: Optional[float] = wire(default=None, doc="epoch seconds of the first fault since it last worked")

    @classmethod
    def from_json(cls, report: Any) -> "StorageReport":
        try:
            return cls(**check_health_report(report))
        except ValueError as exc:
            raise ProtocolViolation(str(exc)) from None

    def to_json(self) -> Dict[str, Any]:
        return {"healthy": self.healthy, "error": self.error, "since": self.since, "faults": self.faults}


MAX_PHASES = 16  # phases one time breakdown may name (each name at most 32 characters)


def _phase_seconds(obj: Dict[str, Any], name: str) -> Dict[str, float]:
    """``obj[name]``: phase names to finite seconds >= 0, or ProtocolViolation naming the field."""
    value = obj.get(name) or {}
    if not isinstance(value, dict) or len(value) > MAX_PHASES or not all(
            isinstance(k, str) and 0 < len(k) <= 32 and finite_number(v) and v >= 0 for k, v in value.items()):
        raise ProtocolViolation(f"field {name!r} must map at most {MAX_PHASES} phase names (1-32 characters) to "
                                f"seconds >= 0, got {value!r:.80}")
    return {k: float(v) for k, v in value.items()}


@dataclass
class TimeBreakdown:
    """Where a worker's wall time went since it was set up, in cumulative seconds (``time.perf_counter``).

    ``phases``: the worker's main loop (they sum to at most ``wall_seconds``; the rest is its bookkeeping and
    idling). A collector's: env_step, policy_forward, chunk_write, policy_load, waiting (for allowance or a new
    policy version), evaluate; a learner's: waiting_for_data, train, publishing. ``background``: threads beside
    the main loop (overlapping it); a learner's data thread: sample_request (asking the coordinator, its long
    poll included), reading_rows (chunk files into batches)."""

    wall_seconds: float = wire(doc="seconds since the worker was set up")
    phases: Dict[str, float] = wire(default_factory=dict, doc="main-loop phase -> seconds (sum <= wall_seconds)")
    background: Dict[str, float] = wire(default_factory=dict, doc="background thread phase -> seconds")

    @classmethod
    def from_json(cls, obj: Any) -> "TimeBreakdown":
        if not isinstance(obj, dict):
            raise ProtocolViolation(f"a time breakdown must be an object, got {obj!r:.80}")
        wall = obj.get("wall_seconds")
        if not finite_number(wall) or wall < 0:
            raise ProtocolViolation(f"field 'wall_seconds' must be a finite number >= 0, got {wall!r:.40}")
        phases, background = _phase_seconds(obj, "phases"), _phase_seconds(obj, "background")
        if sum(phases.values()) > 1.001 * wall + 0.01:  # one clock, read once: only rounding may add
            raise ProtocolViolation(f"the phases sum to {sum(phases.values()):.3f} s, more than wall_seconds={wall}")
        return cls(wall_seconds=float(wall), phases=phases, background=background)

    def to_json(self) -> Dict[str, Any]:
        return _json_fields(self)

    def view(self) -> Dict[str, Any]:
        """What GET /api/v1/workers shows: each phase's seconds and fraction of the wall time, ``other`` (the rest
        of the main loop's time) among the phases."""
        wall = self.wall_seconds

        def share(seconds: Dict[str, float]) -> Dict[str, Dict[str, float]]:
            return {k: {"seconds": round(v, 3), "fraction": round(v / wall, 4) if wall > 0 else 0.0}
                    for k, v in seconds.items()}

        other = max(0.0, wall - sum(self.phases.values()))
        return {"wall_seconds": round(wall, 3), "phases": share({**self.phases, "other": other}),
                "background": share(self.background)}


# ---- metadata messages (POST /api/v1/workers/<id>/metadata) ------------------------------------------------
# wire type -> message class; filled by Message subclasses
MESSAGES: Dict[str, Type["Message"]] = {}


class Message:
    """A metadata message a worker sends the coordinator; on the wire an object with a ``type``.

    ``TYPE`` is the wire type, ``SENDERS`` the roles that may send it."""

    TYPE: ClassVar[str]
    SENDERS: ClassVar[Tuple[str, ...]]

    def __init_subclass__(cls, type: Optional[str] = None, senders: Tuple[str, ...] = (), **kw: Any):
        super().__init_subclass__(**kw)
        if type is not None:
            cls.TYPE, cls.SENDERS = type, senders
            MESSAGES[type] = cls

    @classmethod
    def from_json(cls, obj: Dict[str, Any]) -> "Message":
        raise NotImplementedError

    def to_json(self) -> Dict[str, Any]:
        return {"type": self.TYPE, **_json_fields(self)}


def message_class(obj: Any) -> Type[Message]:
    """The class of the message ``obj`` (a JSON object with a known ``type``), or ProtocolViolation."""
    if not isinstance(obj, dict) or not isinstance(obj.get("type"), str):
        raise ProtocolViolation(f"each message must be an object with a 'type', got {obj!r:.80}")
    cls = MESSAGES.get(obj["type"])
    if cls is None:
        raise ProtocolViolation(f"unknown message type {obj['type']!r:.40} (one of {sorted(MESSAGES)})")
    return cls


def parse_message(obj: Any) -> Message:
    """``obj`` read as the message its ``type`` names (ProtocolViolation naming what is wrong)."""
    return message_class(obj).from_json(obj)


@dataclass
class Chunk(Message, type="chunk", senders=("collector",)):
    """A chunk file of step data is on the shared disk: its rows enter the replay index."""

    chunk: str = wire(doc="the chunk's name (letters, digits, '_', '-', '.'; max 128, no '..'); its file holds "
                          "the rows")
    size: int = wire(lo=1, hi=MAX_STEPS_PER_MESSAGE, doc="rows in the file")
    policy_version: int = wire(lo=-1, doc="the policy that collected it (-1: random, before the first); published "
                                          "(announced, or on the shared disk)")
    env_steps: int = wire(lo=0, hi=MAX_STEPS_PER_MESSAGE, default=0, doc="env steps it holds")
    episode_returns: List[float] = wire(default_factory=list, doc="returns of the episodes that ended in it: at "
                                                                  "most env_steps finite numbers")
    task_id: Optional[str] = wire(default=None, doc="the collector task that wrote it (runs on the sender)")

    @classmethod
    def from_json(cls, obj: Dict[str, Any]) -> "Chunk":
        chunk = _string(obj, "chunk")
        task_id = _string(obj, "task_id", optional=True)
        version = _int(cls, obj, "policy_version")
        steps = _int(cls, obj, "env_steps")
        returns = obj.get("episode_returns", [])
        if not isinstance(returns, list) or len(returns) > steps or not all(finite_number(r) for r in returns):
            raise ProtocolViolation(f"episode_returns must be at most env_steps={steps} finite numbers, "
                                    f"got {returns!r:.80}")
        return cls(chunk=chunk, size=_int(cls, obj, "size"), policy_version=version, env_steps=steps,
                   episode_returns=returns, task_id=task_id)


@dataclass
class TaskEnd(Message):
    """A task ended on the sender (``task_done``, ``task_cancelled``, ``task_failed``)."""

    task_id: str = wire(doc="runs on the sender")
    result: Dict[str, Any] = wire(default_factory=dict, doc="the task's result (an evaluator's: "
                                                            "eval_episode_return_mean a finite number or null, "
                                                            "episodes an integer)")
    error: Optional[str] = wire(default=None, doc="why it failed")
    storage: Optional[StorageReport] = wire(default=None, doc="task_failed: the sender's store health, when the "
                                                              "task failed on the shared store")

    @classmethod
    def from_json(cls, obj: Dict[str, Any]) -> "TaskEnd":
        task_id = _string(obj, "task_id")
        result, error = obj.get("result") or {}, obj.get("error")
        if not isinstance(result, dict) or (error is not None and not isinstance(error, str)):
            raise ProtocolViolation(f"'result' must be an object and 'error' a string, "
                                    f"got {type(result).__name__} and {type(error).__name__}")
        storage = obj.get("storage")
        return cls(task_id=task_id, result=result, error=error,
                   storage=None if storage is None else StorageReport.from_json(storage))


class TaskDone(TaskEnd, type="task_done", senders=ROLES):
    """The task finished (its result is final)."""


class TaskCancelled(TaskEnd, type="task_cancelled", senders=ROLES):
    """The task was stopped (asked to, or before it started)."""


class TaskFailed(TaskEnd, type="task_failed", senders=ROLES):
    """The task failed with ``error`` (on the shared store when ``storage`` says it failing)."""


@dataclass
class Policy(Message, type="policy", senders=("learner",)):
    """A learner wrote policy checkpoint ``version`` on the shared disk."""

    version: int = wire(lo=0, hi=MAX_COUNTER, doc="its checkpoint is on the shared disk")

    @classmethod
    def from_json(cls, obj: Dict[str, Any]) -> "Policy":
        return cls(version=_int(cls, obj, "version"))


@dataclass
class LearnInfo(Message, type="learn_info", senders=("learner",)):
    """A learner's progress: loss, q-value, data wait, ..."""

    train_iter: int = wire(lo=0, hi=MAX_COUNTER, doc="the learner's iteration")
    info: Dict[str, Optional[float]] = wire(default_factory=dict, doc="names to finite numbers (or booleans) "
                                                                      "or null")
    task_id: Optional[str] = wire(default=None, doc="the learner task (runs on the sender)")

    @classmethod
    def from_json(cls, obj: Dict[str, Any]) -> "LearnInfo":
        task_id = _string(obj, "task_id", optional=True)
        info = obj.get("info") or {}
        if not isinstance(info, dict) or not all(
                isinstance(k, str) and (v is None or isinstance(v, bool) or finite_number(v))
                for k, v in info.items()):
            raise ProtocolViolation(f"'info' must map names to finite numbers or null, got {info!r:.80}")
        return cls(train_iter=_int(cls, obj, "train_iter"), info=dict(info), task_id=task_id)


@dataclass
class Games(Message, type="games", senders=("collector",)):
    """Two-player games: the training player's results against ``opponent`` in the last chunk."""

    task_id: str = wire(doc="the collector task that played them (runs on the sender)")
    opponent: str = wire(doc="a player name of 1-64 characters")
    win: int = wire(lo=0, hi=MAX_STEPS_PER_MESSAGE, default=0)
    draw: int = wire(lo=0, hi=MAX_STEPS_PER_MESSAGE, default=0)
    loss: int = wire(lo=0, hi=MAX_STEPS_PER_MESSAGE, default=0)
    player: Optional[str] = wire(default=None, doc="the training player (main)")

    @classmethod
    def from_json(cls, obj: Dict[str, Any]) -> "Games":
        task_id = _string(obj, "task_id")
        opponent = obj.get("opponent")
        if not isinstance(opponent, str) or not opponent or len(opponent) > 64:
            raise ProtocolViolation(f"field 'opponent' must be a player name, got {opponent!r:.60}")
        player = obj.get("player")  # informational: the coordinator counts for its trained player
        return cls(task_id=task_id, opponent=opponent, win=_int(cls, obj, "win"), draw=_int(cls, obj, "draw"),
                   loss=_int(cls, obj, "loss"), player=player if isinstance(player, str) else None)

    @property
    def counts(self) -> Dict[str, int]:
        return {"win": self.win, "draw": self.draw, "loss": self.loss}


@dataclass
class ChunkDamaged(Message, type="chunk_damaged", senders=("learner",)):
    """A learner could not read chunk ``chunk``: its rows leave the replay index."""

    chunk: str = wire(doc="the chunk's name")
    error: str = wire(doc="what is wrong with it (kept to 300 characters)")

    @classmethod
    def from_json(cls, obj: Dict[str, Any]) -> "ChunkDamaged":
        chunk = _string(obj, "chunk")
        error = obj.get("error")
        if not isinstance(error, str):
            raise ProtocolViolation(f"field 'error' must be a string saying what is wrong with the chunk, "
                                    f"got {type(error).__name__}")
        return cls(chunk=chunk, error=error)


# ---- request bodies -----------------------------------------------------------------------------------------
@dataclass
class MetadataBatch:
    """``POST /api/v1/workers/<id>/metadata``: messages, each read on its own (a bad one is refused alone)."""

    messages: List[Dict[str, Any]] = wire(doc="the messages (objects with a type), applied in order")
    wait_for_allowance: float = wire(default=0.0, doc="a throttled collector: wait up to this many seconds (at "
                                                      "most 10) until it may collect again")
    policy_version: Optional[int] = wire(default=None, doc="the newest policy the collector knows: a newer one "
                                                           "ends the wait (left out: only allowance does)")
    loaded_version: Optional[int] = wire(default=None, doc="on-policy: the policy the collector acts with; its "
                                                           "share of the segment counts only when this is the "
                                                           "current one, and none before a first policy")

    @classmethod
    def from_json(cls, obj: Dict[str, Any]) -> "MetadataBatch":
        return cls(messages=field(obj, "messages", list),
                   wait_for_allowance=number_field(obj, "wait_for_allowance", 0.0),
                   policy_version=field(obj, "policy_version", int, required=False),
                   loaded_version=field(obj, "loaded_version", int, required=False))

    def to_json(self) -> Dict[str, Any]:
        return _json_fields(self)


def _is_rank(r: Any) -> bool:
    """A learner rank as a LearnerAggregator lists it in its heartbeats."""
    return (isinstance(r, dict) and set(r) == {"rank", "pid", "state"} and type(r["rank"]) is int
            and (r["pid"] is None or type(r["pid"]) is int) and isinstance(r["state"], str) and len(r["state"]) <= 32)


@dataclass
class Heartbeat:
    """``POST /api/v1/workers/<id>/heartbeat`` (every field optional; the body may be empty)."""

    problems: Optional[List[str]] = wire(default=None, doc="what went wrong in the worker's threads (the last 20 "
                                                           "kept, 500 characters each)")
    tasks: Optional[List[str]] = wire(default=None, doc="the tasks the worker holds: queued, running, or with an "
                                                        f"end report not yet delivered (at most {MAX_TASK_IDS})")
    ranks: Optional[List[Dict[str, Any]]] = wire(default=None, doc="a LearnerAggregator's data-parallel ranks",
                                                 schema={"type": "array", "items": _ref("LearnerRank"),
                                                         "nullable": True})
    storage: Optional[StorageReport] = wire(default=None, doc="the shared store as the worker sees it")
    time_breakdown: Optional[TimeBreakdown] = wire(default=None, doc="where the worker's time went since it was "
                                                                     "set up")

    @classmethod
    def from_json(cls, body: Any) -> "Heartbeat":
        body = body if isinstance(body, dict) else {}
        problems = body.get("problems")
        if problems is not None and (not isinstance(problems, list) or not all(isinstance(p, str) for p in problems)):
            raise ProtocolViolation("field 'problems' must be a list of strings")
        tasks = body.get("tasks")
        if tasks is not None and (not isinstance(tasks, list) or len(tasks) > MAX_TASK_IDS
                                  or not all(isinstance(t, str) for t in tasks)):
            raise ProtocolViolation(f"field 'tasks' must be a list of at most {MAX_TASK_IDS} task ids")
        ranks = body.get("ranks")
        if ranks is not None and (not isinstance(ranks, list) or len(ranks) > MAX_RANKS
                                  or not all(_is_rank(r) for r in ranks)):
            raise ProtocolViolation(f"field 'ranks' must be a list of at most {MAX_RANKS} objects "
                                    "{rank: int, pid: int or null, state: str}")
        storage, breakdown = body.get("storage"), body.get("time_breakdown")
        return cls(problems=None if problems is None else [p[:500] for p in problems[-20:]], tasks=tasks, ranks=ranks,
                   storage=None if storage is None else StorageReport.from_json(storage),
                   time_breakdown=None if breakdown is None else TimeBreakdown.from_json(breakdown))

    def to_json(self) -> Dict[str, Any]:
        return _json_fields(self)


@dataclass
class SampleRequest:
    """``POST /api/v1/buffers/<name>/sample``: a learner asks for references to its next batches; priorities of
    its past batches ride along."""

    worker_id: str = wire(doc="the learner")
    batch_size: int = wire(lo=1, hi=65536, doc="rows per batch (on-policy: the segment's rows)")
    batches: int = wire(lo=1, hi=256, default=1)
    train_iter: int = wire(default=0, doc="the learner's iteration")
    ahead: int = wire(lo=0, hi=256, default=0, doc="batches the learner holds and has not trained on yet: the "
                      "answer's first batch is trained at train_iter + ahead (the asynchronous on-policy flow's "
                      "staleness bound counts from there)")
    wait: float = wire(default=1.0, doc="seconds to wait for enough data (at most 10)")
    encoding: str = wire(default="json", doc="numbers in the answer as JSON lists (json), or packed (base64)")
    priorities: Optional[Dict[str, Any]] = wire(
        default=None, doc="new priorities of past batches' rows",
        schema={"type": "object", "nullable": True, "properties": {k: _ref("Numbers") for k in PRIORITY_KEYS}})

    @classmethod
    def from_json(cls, body: Dict[str, Any]) -> "SampleRequest":
        batch_size = field(body, "batch_size", int)
        batches = field(body, "batches", int, required=False, default=1)
        if not 1 <= batch_size <= 65536 or not 1 <= batches <= 256:
            raise ProtocolViolation(f"need 1 <= batch_size <= 65536 and 1 <= batches <= 256, "
                                    f"got {batch_size=} {batches=}")
        encoding = field(body, "encoding", str, required=False, default="json")
        if encoding not in ("json", "base64"):
            raise ProtocolViolation(f"field 'encoding' must be 'json' or 'base64', got {encoding!r}")
        return cls(worker_id=field(body, "worker_id", str), batch_size=batch_size, batches=batches,
                   train_iter=field(body, "train_iter", int, required=False, default=0),
                   ahead=_int(cls, body, "ahead"),
                   wait=number_field(body, "wait", 1.0), encoding=encoding,
                   priorities=field(body, "priorities", dict, required=False))

    def to_json(self) -> Dict[str, Any]:
        return _json_fields(self)


@dataclass
class SampleAnswer:
    """The answer to a SampleRequest: the chunk files the batches refer to, and up to ``batches`` batches of
    references (each row: ``chunk`` indexes ``chunks``, ``row`` in it; ``index``/``uid`` name its buffer slot for
    the priority update; ``weight`` its importance weight), as JSON lists or packed (Numbers)."""

    chunks: List[str] = wire(doc="chunk files the batches refer to (their `chunk` indexes this)")
    batches: List[Dict[str, Any]] = wire(schema={"type": "array", "items": {
        "type": "object", "properties": {k: _ref("Numbers") for k in REFERENCE_KEYS}}})
    control: Optional[Dict[str, Any]] = wire(default=None, schema={"allOf": [_ref("Control")], "nullable": True})
    retry_after: Optional[float] = wire(default=None, doc="every long-poll slot was taken: ask again after this "
                                                          "many seconds")

    @classmethod
    def from_json(cls, obj: Any) -> "SampleAnswer":
        if not isinstance(obj, dict):
            raise ProtocolViolation(f"a sample answer must be an object, got {obj!r:.80}")
        chunks, batches, control = obj.get("chunks", []), obj.get("batches", []), obj.get("control")
        if not isinstance(chunks, list) or not isinstance(batches, list) or not (control is None
                                                                               or isinstance(control, dict)):
            raise ProtocolViolation(f"a sample answer needs lists 'chunks' and 'batches', got {obj!r:.80}")
        retry = obj.get("retry_after")
        return cls(chunks=chunks, batches=batches, control=control,
                   retry_after=float(retry) if finite_number(retry) else None)

    def to_json(self) -> Dict[str, Any]:
        return _json_fields(self)


@dataclass
class Registration:
    """``POST /api/v1/collectors`` or ``/learners``: add the running slave at ``address``; without one, a
    coordinator inside ``parallel-rl run`` has its launcher start one more (202), one on its own answers 400."""

    address: Optional[str] = wire(default=None, doc="http://HOST:PORT the slave serves on (and advertises)")
    worker_id: Optional[str] = wire(default=None, doc="the id wanted (the launcher's name, or the id held before a "
                                                      "coordinator restart); given when no entry holds it")

    @classmethod
    def from_json(cls, body: Dict[str, Any]) -> "Registration":
        return cls(address=field(body, "address", str, required=False),
                   worker_id=field(body, "worker_id", str, required=False))

    def to_json(self) -> Dict[str, Any]:
        return _json_fields(self)


BODIES = (MetadataBatch, Heartbeat, SampleRequest, SampleAnswer, Registration, StorageReport, TimeBreakdown)
