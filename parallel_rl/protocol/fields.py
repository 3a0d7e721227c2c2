"""The words every message is written in: the wire limits, ``wire`` (a dataclass field with its limits and OpenAPI
description) and the checks the messages share."""

from __future__ import annotations

import dataclasses
import functools
import sys
from typing import TYPE_CHECKING, Any, Dict, Literal, Optional, Tuple, Type, TypeGuard, Union, overload

from ..errors import ProtocolViolation

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

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


def wire(
    *,
    lo: Optional[float] = None,
    hi: Optional[float] = None,
    doc: str = "",
    schema: Optional[Dict[str, Any]] = None,
    **kw: Any,
) -> Any:
    """A dataclass field with its wire limits (``lo``/``hi`` for numbers) and its OpenAPI description;
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


def finite_number(value: Any) -> TypeGuard[Union[int, float]]:
    """Whether ``value`` is an int or a float that is finite as a float (an integer past float range is not:
    ``math.isfinite`` of it raises OverflowError)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and abs(value) <= sys.float_info.max


def check_eval_result(result: Dict[str, Any]) -> None:
    """An evaluator's result: ``eval_episode_return_mean`` a finite number or null (no episode finished),
    ``episodes`` an integer; ProtocolViolation naming the field otherwise."""
    mean = result.get("eval_episode_return_mean")
    if mean is not None and not finite_number(mean):
        raise ProtocolViolation(
            f"result field 'eval_episode_return_mean' must be a finite number or null, got {mean!r:.40}"
        )
    checked_int(result, "episodes", 0, MAX_STEPS_PER_MESSAGE, default=0)


def _int(cls: "Type[DataclassInstance]", obj: Dict[str, Any], name: str) -> int:
    """``obj[name]`` checked against the limits (and default) of ``cls``'s field ``name``."""
    return checked_int(obj, name, *_limits(cls, name))


@functools.lru_cache(maxsize=None)
def _limits(cls: "Type[DataclassInstance]", name: str) -> Tuple[int, Optional[int], Any]:
    """``(lo, hi, default)`` of ``cls``'s integer field ``name`` (read once: messages are read by the thousand)."""
    f = cls.__dataclass_fields__[name]
    return f.metadata["lo"], f.metadata["hi"], f.default if f.default is not dataclasses.MISSING else None


@overload
def _string(obj: Dict[str, Any], name: str, optional: Literal[False] = False) -> str: ...


@overload
def _string(obj: Dict[str, Any], name: str, optional: bool) -> Optional[str]: ...


def _string(obj: Dict[str, Any], name: str, optional: bool = False) -> Optional[str]:
    value = obj.get(name)
    if value is None and optional:
        return None
    if not isinstance(value, str):
        raise ProtocolViolation(f"field {name!r} must be a string, got {value!r:.40}")
    return value


def _json_fields(obj: "DataclassInstance") -> Dict[str, Any]:
    """A dataclass's fields as JSON values; optional fields that are None are left out (a reader's default)."""
    out = {}
    for name, optional in _wire_fields(type(obj)):
        value = getattr(obj, name)
        if value is None and optional:
            continue
        out[name] = value.to_json() if hasattr(value, "to_json") else value
    return out


@functools.lru_cache(maxsize=None)
def _wire_fields(cls: "Type[DataclassInstance]") -> Tuple[Tuple[str, bool], ...]:
    """``(name, left out when None)`` of each field of ``cls`` (dataclasses.fields costs more than a message)."""
    return tuple((f.name, f.default is None) for f in dataclasses.fields(cls))
