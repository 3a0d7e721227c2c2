"""The metadata messages (``POST /api/v1/workers/<id>/metadata``): one dataclass per wire ``type``."""

from __future__ import annotations

from dataclasses import Field, dataclass
from typing import Any, ClassVar, Dict, List, Optional, Tuple, Type

from ..errors import ProtocolViolation
from .fields import MAX_COUNTER, MAX_STEPS_PER_MESSAGE, ROLES, _int, _json_fields, _string, finite_number, wire
from .parts import StorageReport

# wire type -> message class; filled by Message subclasses
MESSAGES: Dict[str, Type["Message"]] = {}


class Message:
    """A metadata message a worker sends the coordinator; on the wire an object with a ``type``.

    ``TYPE`` is the wire type, ``SENDERS`` the roles that may send it."""

    TYPE: ClassVar[str]
    SENDERS: ClassVar[Tuple[str, ...]]
    # every message is a dataclass (each subclass is declared one): the fields to_json writes
    __dataclass_fields__: ClassVar[Dict[str, "Field[Any]"]]

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

    chunk: str = wire(
        doc="the chunk's name (letters, digits, '_', '-', '.'; max 128, no '..'); its file holds the rows"
    )
    size: int = wire(lo=1, hi=MAX_STEPS_PER_MESSAGE, doc="rows in the file")
    policy_version: int = wire(
        lo=-1,
        doc="the policy that collected it (-1: random, before the first); published (announced, or on the shared disk)",
    )
    env_steps: int = wire(lo=0, hi=MAX_STEPS_PER_MESSAGE, default=0, doc="env steps it holds")
    episode_returns: List[float] = wire(
        default_factory=list, doc="returns of the episodes that ended in it: at most env_steps finite numbers"
    )
    task_id: Optional[str] = wire(default=None, doc="the collector task that wrote it (runs on the sender)")

    @classmethod
    def from_json(cls, obj: Dict[str, Any]) -> "Chunk":
        chunk = _string(obj, "chunk")
        task_id = _string(obj, "task_id", optional=True)
        version = _int(cls, obj, "policy_version")
        steps = _int(cls, obj, "env_steps")
        returns = obj.get("episode_returns", [])
        if not isinstance(returns, list) or len(returns) > steps or not all(finite_number(r) for r in returns):
            raise ProtocolViolation(
                f"episode_returns must be at most env_steps={steps} finite numbers, got {returns!r:.80}"
            )
        return cls(
            chunk=chunk,
            size=_int(cls, obj, "size"),
            policy_version=version,
            env_steps=steps,
            episode_returns=returns,
            task_id=task_id,
        )


@dataclass
class TaskEnd(Message):
    """A task ended on the sender (``task_done``, ``task_cancelled``, ``task_failed``)."""

    task_id: str = wire(doc="runs on the sender")
    result: Dict[str, Any] = wire(
        default_factory=dict,
        doc="the task's result (an evaluator's: eval_episode_return_mean a finite number or null, episodes an integer)",
    )
    error: Optional[str] = wire(default=None, doc="why it failed")
    storage: Optional[StorageReport] = wire(
        default=None, doc="task_failed: the sender's store health, when the task failed on the shared store"
    )

    @classmethod
    def from_json(cls, obj: Dict[str, Any]) -> "TaskEnd":
        task_id = _string(obj, "task_id")
        result, error = obj.get("result") or {}, obj.get("error")
        if not isinstance(result, dict) or (error is not None and not isinstance(error, str)):
            raise ProtocolViolation(
                f"'result' must be an object and 'error' a string, "
                f"got {type(result).__name__} and {type(error).__name__}"
            )
        storage = obj.get("storage")
        return cls(
            task_id=task_id,
            result=result,
            error=error,
            storage=None if storage is None else StorageReport.from_json(storage),
        )


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
    info: Dict[str, Optional[float]] = wire(default_factory=dict, doc="names to finite numbers (or booleans) or null")
    task_id: Optional[str] = wire(default=None, doc="the learner task (runs on the sender)")

    @classmethod
    def from_json(cls, obj: Dict[str, Any]) -> "LearnInfo":
        task_id = _string(obj, "task_id", optional=True)
        info = obj.get("info") or {}
        if not isinstance(info, dict) or not all(
            isinstance(k, str) and (v is None or isinstance(v, bool) or finite_number(v)) for k, v in info.items()
        ):
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
        return cls(
            task_id=task_id,
            opponent=opponent,
            win=_int(cls, obj, "win"),
            draw=_int(cls, obj, "draw"),
            loss=_int(cls, obj, "loss"),
            player=player if isinstance(player, str) else None,
        )

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
            raise ProtocolViolation(
                f"field 'error' must be a string saying what is wrong with the chunk, got {type(error).__name__}"
            )
        return cls(chunk=chunk, error=error)
