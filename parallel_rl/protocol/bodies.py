"""The request bodies of the worker routes and the sample answer."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Dict, List, Optional

from ..errors import ProtocolViolation
from ..transport.codec import check_url, field, number_field
from .fields import (
    MAX_RANKS,
    MAX_TASK_IDS,
    PRIORITY_KEYS,
    REFERENCE_KEYS,
    _int,
    _json_fields,
    _ref,
    finite_number,
    wire,
)
from .parts import StorageReport, TimeBreakdown


@dataclass
class MetadataBatch:
    """``POST /api/v1/workers/<id>/metadata``: messages, each read on its own (a bad one is refused alone)."""

    messages: List[Dict[str, Any]] = wire(doc="the messages (objects with a type), applied in order")
    wait_for_allowance: float = wire(
        default=0.0, doc="a throttled collector: wait up to this many seconds (at most 10) until it may collect again"
    )
    policy_version: Optional[int] = wire(
        default=None,
        doc="the newest policy the collector knows: a newer one ends the wait (left out: only allowance does)",
    )
    loaded_version: Optional[int] = wire(
        default=None,
        doc="on-policy: the policy the collector acts with; its "
        "share of the segment counts only when this is the "
        "current one, and none before a first policy",
    )

    @classmethod
    def from_json(cls, obj: Dict[str, Any]) -> "MetadataBatch":
        return cls(
            messages=field(obj, "messages", list),
            wait_for_allowance=number_field(obj, "wait_for_allowance", 0.0),
            policy_version=field(obj, "policy_version", int, required=False),
            loaded_version=field(obj, "loaded_version", int, required=False),
        )

    def to_json(self) -> Dict[str, Any]:
        return _json_fields(self)


def _is_rank(r: Any) -> bool:
    """A learner rank as a LearnerAggregator lists it in its heartbeats."""
    return (
        isinstance(r, dict)
        and set(r) == {"rank", "pid", "state"}
        and type(r["rank"]) is int
        and (r["pid"] is None or type(r["pid"]) is int)
        and isinstance(r["state"], str)
        and len(r["state"]) <= 32
    )


@dataclass
class Heartbeat:
    """``POST /api/v1/workers/<id>/heartbeat`` (every field optional; the body may be empty)."""

    problems: Optional[List[str]] = wire(
        default=None, doc="what went wrong in the worker's threads (the last 20 kept, 500 characters each)"
    )
    tasks: Optional[List[str]] = wire(
        default=None,
        doc="the tasks the worker holds: queued, running, or with an "
        f"end report not yet delivered (at most {MAX_TASK_IDS})",
    )
    ranks: Optional[List[Dict[str, Any]]] = wire(
        default=None,
        doc="a LearnerAggregator's data-parallel ranks",
        schema={"type": "array", "items": _ref("LearnerRank"), "nullable": True},
    )
    storage: Optional[StorageReport] = wire(default=None, doc="the shared store as the worker sees it")
    time_breakdown: Optional[TimeBreakdown] = wire(default=None, doc="where the worker's time went since it was set up")
    ready: Optional[bool] = wire(
        default=None,
        doc="the worker built its envs and model and takes tasks (false while it sets up, after connect answered)",
    )
    setup_error: Optional[str] = wire(
        default=None, doc="why the worker's set-up failed (one line, 500 characters kept): the coordinator lets it go"
    )
    unanswered_seconds: Optional[float] = wire(
        default=None,
        lo=0.0,
        hi=1e9,
        doc="seconds since the worker's last call the coordinator answered, "
        "when its calls since went unanswered (the answers are lost on "
        "the way back): past half the lease it is shown unreachable",
    )

    @classmethod
    def from_json(cls, body: Any) -> "Heartbeat":
        body = body if isinstance(body, dict) else {}
        problems = body.get("problems")
        if problems is not None and (not isinstance(problems, list) or not all(isinstance(p, str) for p in problems)):
            raise ProtocolViolation("field 'problems' must be a list of strings")
        tasks = body.get("tasks")
        if tasks is not None and (
            not isinstance(tasks, list) or len(tasks) > MAX_TASK_IDS or not all(isinstance(t, str) for t in tasks)
        ):
            raise ProtocolViolation(f"field 'tasks' must be a list of at most {MAX_TASK_IDS} task ids")
        ranks = body.get("ranks")
        if ranks is not None and (
            not isinstance(ranks, list) or len(ranks) > MAX_RANKS or not all(_is_rank(r) for r in ranks)
        ):
            raise ProtocolViolation(
                f"field 'ranks' must be a list of at most {MAX_RANKS} objects "
                "{rank: int, pid: int or null, state: str}"
            )
        storage, breakdown = body.get("storage"), body.get("time_breakdown")
        ready, setup_error = body.get("ready"), body.get("setup_error")
        if ready is not None and not isinstance(ready, bool):
            raise ProtocolViolation(f"field 'ready' must be true or false, got {ready!r:.40}")
        if setup_error is not None and not isinstance(setup_error, str):
            raise ProtocolViolation(f"field 'setup_error' must be a string, got {setup_error!r:.40}")
        unanswered = body.get("unanswered_seconds")
        if unanswered is not None and (
            isinstance(unanswered, bool) or not isinstance(unanswered, (int, float)) or not 0 <= unanswered <= 1e9
        ):
            raise ProtocolViolation(
                f"field 'unanswered_seconds' must be a number of seconds in [0, 1e9], got {unanswered!r:.40}"
            )
        return cls(
            problems=None if problems is None else [p[:500] for p in problems[-20:]],
            tasks=tasks,
            ranks=ranks,
            storage=None if storage is None else StorageReport.from_json(storage),
            time_breakdown=None if breakdown is None else TimeBreakdown.from_json(breakdown),
            ready=ready,
            setup_error=None if setup_error is None else setup_error[:500],
            unanswered_seconds=None if unanswered is None else float(unanswered),
        )

    def to_json(self) -> Dict[str, Any]:
        return _json_fields(self)


@dataclass
class SampleRequest:
    """``POST /api/v1/buffers/<name>/sample``: a learner asks for references to its next batches; priorities of
    its past batches ride along."""

    worker_id: str = wire(doc="the learner")
    batch_size: Optional[int] = wire(
        lo=1,
        hi=65536,
        default=None,
        doc="rows per batch; left out (as the cluster's learners do), the coordinator's own data flow's: "
        "policy.learn.batch_size, on-policy policy.collect.n_sample (the segment's rows)",
    )
    batches: int = wire(lo=1, hi=256, default=1)
    train_iter: int = wire(default=0, doc="the learner's iteration")
    ahead: int = wire(
        lo=0,
        hi=256,
        default=0,
        doc="batches the learner holds and has not trained on yet: the "
        "answer's first batch is trained at train_iter + ahead (the asynchronous on-policy flow's "
        "staleness bound counts from there)",
    )
    wait: float = wire(default=1.0, doc="seconds to wait for enough data (at most 10)")
    encoding: str = wire(default="json", doc="numbers in the answer as JSON lists (json), or packed (base64)")
    priorities: Optional[Dict[str, Any]] = wire(
        default=None,
        doc="new priorities of past batches' rows",
        schema={"type": "object", "nullable": True, "properties": {k: _ref("Numbers") for k in PRIORITY_KEYS}},
    )

    @classmethod
    def from_json(cls, body: Dict[str, Any]) -> "SampleRequest":
        batch_size = field(body, "batch_size", int, required=False)
        batches = field(body, "batches", int, required=False, default=1)
        if not 1 <= (1 if batch_size is None else batch_size) <= 65536 or not 1 <= batches <= 256:
            raise ProtocolViolation(
                f"need 1 <= batch_size <= 65536 and 1 <= batches <= 256, got {batch_size=} {batches=}"
            )
        encoding = field(body, "encoding", str, required=False, default="json")
        if encoding not in ("json", "base64"):
            raise ProtocolViolation(f"field 'encoding' must be 'json' or 'base64', got {encoding!r}")
        return cls(
            worker_id=field(body, "worker_id", str),
            batch_size=batch_size,
            batches=batches,
            train_iter=field(body, "train_iter", int, required=False, default=0),
            ahead=_int(cls, body, "ahead"),
            wait=number_field(body, "wait", 1.0),
            encoding=encoding,
            priorities=field(body, "priorities", dict, required=False),
        )

    def to_json(self) -> Dict[str, Any]:
        return _json_fields(self)


@dataclass
class SampleAnswer:
    """The answer to a SampleRequest: the chunk files the batches refer to, and up to ``batches`` batches of
    references (each row: ``chunk`` indexes ``chunks``, ``row`` in it; ``index``/``uid`` name its buffer slot for
    the priority update; ``weight`` its importance weight), as JSON lists or packed (Numbers)."""

    chunks: List[str] = wire(doc="chunk files the batches refer to (their `chunk` indexes this)")
    batches: List[Dict[str, Any]] = wire(
        schema={
            "type": "array",
            "items": {"type": "object", "properties": {k: _ref("Numbers") for k in REFERENCE_KEYS}},
        }
    )
    control: Optional[Dict[str, Any]] = wire(default=None, schema={"allOf": [_ref("Control")], "nullable": True})
    retry_after: Optional[float] = wire(
        default=None, doc="every long-poll slot was taken: ask again after this many seconds"
    )

    @classmethod
    def from_json(cls, obj: Any) -> "SampleAnswer":
        if not isinstance(obj, dict):
            raise ProtocolViolation(f"a sample answer must be an object, got {obj!r:.80}")
        chunks, batches, control = obj.get("chunks", []), obj.get("batches", []), obj.get("control")
        if (
            not isinstance(chunks, list)
            or not isinstance(batches, list)
            or not (control is None or isinstance(control, dict))
        ):
            raise ProtocolViolation(f"a sample answer needs lists 'chunks' and 'batches', got {obj!r:.80}")
        retry = obj.get("retry_after")
        return cls(
            chunks=chunks, batches=batches, control=control, retry_after=float(retry) if finite_number(retry) else None
        )

    def to_json(self) -> Dict[str, Any]:
        return _json_fields(self)


@dataclass
class Registration:
    """``POST /api/v1/collectors`` or ``/learners``: add the running slave at ``address``; without one, a
    coordinator inside ``parallel-rl run`` has its launcher start one more (202), one on its own answers 400."""

    address: Optional[str] = wire(
        default=None,
        doc="http://HOST:PORT the slave serves on (and advertises); "
        "one that does not parse, or a port out of 1-65535, is a 400",
    )
    worker_id: Optional[str] = wire(
        default=None,
        doc="the id wanted (the launcher's name, or the id held before a "
        "coordinator restart); given when no entry holds it",
    )

    @classmethod
    def from_json(cls, body: Dict[str, Any]) -> "Registration":
        address = field(body, "address", str, required=False)
        return cls(
            address=None if address is None else check_url(address),
            worker_id=field(body, "worker_id", str, required=False),
        )

    def to_json(self) -> Dict[str, Any]:
        return _json_fields(self)


MAX_CONFIG_TEXT = 1024 * 1024  # characters of a submitted config file
MAX_OVERRIDES = 256
RUN_NAME_CHARACTERS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-")


@dataclass
class RunSubmission:
    """``POST /api/v1/runs`` on the service (``parallel-rl serve``): one training for its pool of workers, from a
    config file on the service's host or a config file's text, with ``--set`` overrides. Either ``config`` or
    ``config_text``; the config is compiled before the answer (a config that does not compile is a 400)."""

    config: Optional[str] = wire(default=None, doc="path of a config file on the service's host")
    config_text: Optional[str] = wire(
        default=None,
        doc=f"the text of a Python config file (at most {MAX_CONFIG_TEXT} characters), "
        "kept in the run's directory as config.py",
    )
    overrides: List[str] = wire(
        default_factory=list, doc=f"KEY=VALUE overrides, as --set takes them (at most {MAX_OVERRIDES})"
    )
    weight: float = wire(
        default=1.0, lo=0.01, hi=1000.0, doc="the run's share of the collectors beyond each run's minimum"
    )
    name: Optional[str] = wire(default=None, doc="a label for people (letters, digits, . _ -; default: the config's)")

    @classmethod
    def from_json(cls, body: Dict[str, Any]) -> "RunSubmission":
        config = field(body, "config", str, required=False)
        text = field(body, "config_text", str, required=False)
        if (config is None) == (text is None):
            raise ProtocolViolation("give exactly one of 'config' (a path on the service's host) and 'config_text'")
        if config is not None and not 0 < len(config) <= 4096:
            raise ProtocolViolation(f"field 'config' must be a path of 1-4096 characters, got {len(config)}")
        if text is not None and len(text) > MAX_CONFIG_TEXT:
            raise ProtocolViolation(f"field 'config_text' holds {len(text)} characters, over {MAX_CONFIG_TEXT}")
        overrides = field(body, "overrides", list, required=False, default=[])
        if len(overrides) > MAX_OVERRIDES or not all(isinstance(o, str) and "=" in o for o in overrides):
            raise ProtocolViolation(
                f"field 'overrides' must be a list of at most {MAX_OVERRIDES} strings KEY=VALUE, got {overrides!r:.80}"
            )
        name = field(body, "name", str, required=False)
        if name is not None and not (0 < len(name) <= 100 and set(name) <= RUN_NAME_CHARACTERS):
            raise ProtocolViolation(f"field 'name' must be 1-100 letters, digits, '.', '_' or '-', got {name!r:.60}")
        return cls(
            config=config,
            config_text=text,
            overrides=list(overrides),
            weight=number_field(body, "weight", 1.0, lo=0.01, hi=1000.0),
            name=name,
        )

    def to_json(self) -> Dict[str, Any]:
        return _json_fields(self)


MAX_COMPARE_RUNS = 64  # runs in one GET /api/v1/compare: bounds its reading and its resampling
MAX_COMPARE_REPS = 5000  # bootstrap resamples of one GET /api/v1/compare (the CLI's --reps default is 2000)
COMPARE_GROUPS = ("config", "name")
COMPARE_FORMATS = ("json", "csv")


@dataclass
class CompareQuery:
    """``GET /api/v1/compare?runs=run-1,run-2[&group=config|name][&format=json|csv][&reps=N][&seed=N]
    [&at_env_step=N]`` on the service: the query string, checked (the one door it comes in by). Its caps bound
    the CPU a request costs: at most :data:`MAX_COMPARE_RUNS` runs and :data:`MAX_COMPARE_REPS` resamples."""

    runs: List[str] = wire(doc=f"run ids, comma-separated, each once (1-{MAX_COMPARE_RUNS})")
    group: str = wire(default="config", doc="group the runs by config (apart from seed) or by name without seed suffix")
    format: str = wire(default="json", doc="json, or csv: the CSV `parallel-rl compare --csv` writes")
    reps: int = wire(default=2000, lo=1, hi=MAX_COMPARE_REPS, doc="bootstrap resamples")
    seed: int = wire(default=0, lo=0, hi=2**32 - 1, doc="the bootstrap's seed: the same seed, the same CIs")
    at_env_step: Optional[float] = wire(
        default=None,
        lo=0,
        doc="score each run's last evaluation at or before this env step (default: the smallest "
        "final env step among the runs)",
    )

    @classmethod
    def from_query(cls, args: Any) -> "CompareQuery":
        """From the request's query arguments (a werkzeug MultiDict); ProtocolViolation (400) naming the bad one."""
        allowed = ("runs", "group", "format", "reps", "seed", "at_env_step")
        for key in args.keys():
            if key not in allowed:
                raise ProtocolViolation(f"unknown query parameter {key!r:.40}: use {', '.join(allowed)}")
            if len(args.getlist(key)) > 1:
                raise ProtocolViolation(f"query parameter {key!r} is given twice; give it once")
        runs = [r.strip() for r in args.get("runs", "").split(",") if r.strip()]
        if not runs:
            raise ProtocolViolation("query parameter 'runs' is empty: name run ids, e.g. runs=run-1,run-2")
        if len(runs) > MAX_COMPARE_RUNS:
            raise ProtocolViolation(f"query parameter 'runs' names {len(runs)} runs, over {MAX_COMPARE_RUNS}")
        repeated = sorted({r for r in runs if runs.count(r) > 1})
        if repeated:
            raise ProtocolViolation(f"query parameter 'runs' names {repeated[0]!r:.40} twice; name each run once")
        group, fmt = args.get("group", "config"), args.get("format", "json")
        for name, value, choices in (("group", group, COMPARE_GROUPS), ("format", fmt, COMPARE_FORMATS)):
            if value not in choices:
                raise ProtocolViolation(
                    f"query parameter {name!r} must be one of {', '.join(choices)}, got {value!r:.40}"
                )
        at = args.get("at_env_step")
        if at is not None:
            try:
                at = float(at)
            except ValueError:
                at = math.nan
            if not 0 <= at < math.inf:
                raise ProtocolViolation(
                    f"query parameter 'at_env_step' must be a number of env steps >= 0, got {args['at_env_step']!r:.40}"
                )
        return cls(
            runs=runs,
            group=group,
            format=fmt,
            reps=_int_query(args, "reps", 2000, 1, MAX_COMPARE_REPS),
            seed=_int_query(args, "seed", 0, 0, 2**32 - 1),
            at_env_step=at,
        )


def _int_query(args: Any, name: str, default: int, lo: int, hi: int) -> int:
    raw = args.get(name)
    if raw is None:
        return default
    if not (raw.isascii() and raw.isdigit() and len(raw) <= 12) or not lo <= int(raw) <= hi:
        raise ProtocolViolation(f"query parameter {name!r} must be an integer in [{lo}, {hi}], got {raw!r:.40}")
    return int(raw)


BODIES = (
    MetadataBatch,
    Heartbeat,
    SampleRequest,
    SampleAnswer,
    Registration,
    RunSubmission,
    StorageReport,
    TimeBreakdown,
)
