"""The OpenAPI 3 document of the coordinator's REST API (served at /api/v1/openapi.json).

tests/test_api.py checks it against the app both ways: every documented
operation answers, and every route of the app is documented. The workers'
request bodies and messages are generated from their dataclasses in
:mod:`parallel_rl.protocol` (:func:`protocol_schemas`); the rest is written here.
"""

from __future__ import annotations

import dataclasses
import typing
from typing import Any, Dict, List

from parallel_rl import protocol
from parallel_rl.transport import PACKED_DTYPES


def _ref(name: str) -> Dict[str, str]:
    return {"$ref": f"#/components/schemas/{name}"}


def _json(schema: Dict[str, Any], description: str) -> Dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": schema}}}


ERR = {
    "400": _json(_ref("Error"), "malformed JSON, wrong types or values"),
    "401": _json(_ref("Error"), "missing cluster token"),
    "403": _json(_ref("Error"), "wrong cluster token"),
    "404": _json(_ref("Error"), "unknown id"),
    "405": _json(_ref("Error"), "method not allowed"),
    "413": _json(_ref("Error"), "body too large"),
}

AUTH = [{"bearer": []}]


def _body(schema: str) -> Dict[str, Any]:
    """A required JSON request body of one of the protocol's schemas."""
    return {"required": True, "content": {"application/json": {"schema": _ref(schema)}}}


def _errors(*codes: str) -> Dict[str, Any]:
    return {c: ERR[c] for c in codes}


def _path_param(name: str) -> Dict[str, Any]:
    return {"name": name, "in": "path", "required": True, "schema": {"type": "string"}}


_SCALARS = {str: "string", int: "integer", float: "number", bool: "boolean"}


def _type_schema(hint: Any) -> Dict[str, Any]:
    """The OpenAPI schema of a field's type hint (dataclass types as references)."""
    args = [a for a in typing.get_args(hint) if a is not type(None)]
    origin = typing.get_origin(hint)
    if origin is typing.Union:  # Optional[X]
        inner = _type_schema(args[0])
        return {"allOf": [inner], "nullable": True} if "$ref" in inner else {**inner, "nullable": True}
    if hint in _SCALARS:
        return {"type": _SCALARS[hint]}
    if origin is list:
        return {"type": "array", "items": _type_schema(args[0])}
    if origin is dict:
        value = args[1]
        return {"type": "object"} if value is Any else {"type": "object", "additionalProperties": _type_schema(value)}
    if dataclasses.is_dataclass(hint):
        return json_ref(hint)
    return {}


def json_schema(cls: type) -> Dict[str, Any]:
    """The OpenAPI schema of a message or body class, from its fields: names, types, limits, required ones."""
    hints = typing.get_type_hints(cls)
    properties, required = {}, []
    if isinstance(cls, type) and issubclass(cls, protocol.Message):
        properties["type"] = {"type": "string", "enum": [cls.TYPE]}
        required.append("type")
    for f in dataclasses.fields(cls):
        schema = dict(f.metadata.get("schema") or _type_schema(hints[f.name]))
        for key, bound in (("minimum", f.metadata.get("lo")), ("maximum", f.metadata.get("hi"))):
            if bound is not None:
                schema[key] = bound
        if f.metadata.get("doc"):
            schema["description"] = f.metadata["doc"]
        properties[f.name] = schema
        if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            required.append(f.name)
    schema: Dict[str, Any] = {"type": "object", "properties": properties}
    if required:
        schema["required"] = required
    doc = " ".join((cls.__doc__ or "").split())
    if doc:
        senders = f" From {' or '.join(cls.SENDERS)}s." if issubclass(cls, protocol.Message) else ""
        schema["description"] = doc + senders
    return schema


def protocol_schemas() -> Dict[str, Dict[str, Any]]:
    """Every message and body of :mod:`parallel_rl.protocol`, by class name, from its dataclass: field names,
    types, limits (``lo``/``hi``), descriptions and which fields are required."""
    classes = list(dict.fromkeys([*protocol.MESSAGES.values(), *protocol.BODIES]))
    out = {cls.__name__: json_schema(cls) for cls in classes}
    messages = protocol.MESSAGES
    out["MetadataBatch"]["properties"]["messages"]["items"] = {
        "oneOf": [json_ref(cls) for cls in dict.fromkeys(messages.values())],
        "discriminator": {"propertyName": "type", "mapping": {t: json_ref(cls)["$ref"] for t, cls in messages.items()}},
    }
    return out


def json_ref(cls: type) -> Dict[str, str]:
    return _ref(cls.__name__)


def openapi_document(version: str) -> Dict[str, Any]:
    worker_collection = {
        "name": "collection",
        "in": "path",
        "required": True,
        "schema": {"type": "string", "enum": ["collectors", "learners"]},
    }
    return {
        "openapi": "3.0.3",
        "info": {
            "title": "parallel_rl coordinator",
            "version": version,
            "description": "Inspect and operate a parallel_rl cluster. Mutating calls and worker traffic need "
            "'Authorization: Bearer <PARALLEL_RL_TOKEN>'; read-only calls are open unless "
            "parallel.coordinator.auth_read is set.",
        },
        "servers": [{"url": "/api/v1"}],
        "components": {
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
            "schemas": {
                **protocol_schemas(),
                "Error": {
                    "type": "object",
                    "required": ["error"],
                    "properties": {
                        "error": {
                            "type": "object",
                            "required": ["code", "message"],
                            "properties": {"code": {"type": "string"}, "message": {"type": "string"}},
                        }
                    },
                },
                "League": {
                    "type": "object",
                    "required": ["players", "pool", "retired", "payoff", "games"],
                    "properties": {
                        "players": {
                            "type": "array",
                            "items": {"type": "string"},
                            "description": "main (the trained policy), bots, snapshots v<version>",
                        },
                        "pool": {"type": "array", "items": {"type": "string"}},
                        "retired": {"type": "array", "items": {"type": "string"}},
                        "payoff": {
                            "type": "object",
                            "description": "payoff[a][b]: a's results against b",
                            "additionalProperties": {
                                "type": "object",
                                "additionalProperties": {
                                    "type": "object",
                                    "properties": {
                                        "wins": {"type": "integer"},
                                        "draws": {"type": "integer"},
                                        "losses": {"type": "integer"},
                                        "games": {"type": "integer"},
                                        "win_rate": {"type": "number", "nullable": True},
                                    },
                                },
                            },
                        },
                        "games": {"type": "integer"},
                    },
                },
                "Task": {
                    "type": "object",
                    "required": ["task_id", "kind", "state", "worker_id", "attempts"],
                    "properties": {
                        "task_id": {"type": "string"},
                        "kind": {"type": "string", "enum": ["collector", "learner", "evaluator"]},
                        "state": {"type": "string", "enum": ["pending", "running", "finished", "failed", "cancelled"]},
                        "worker_id": {"type": "string", "nullable": True},
                        "created_at": {"type": "number"},
                        "started_at": {"type": "number", "nullable": True},
                        "finished_at": {"type": "number", "nullable": True},
                        "attempts": {"type": "integer"},
                        "progress": {"type": "object"},
                        "result": {"type": "object", "nullable": True},
                        "error": {"type": "string", "nullable": True},
                        "replaces": {"type": "string", "nullable": True},
                        "spec": {"type": "object"},
                    },
                },
                "Worker": {
                    "type": "object",
                    "required": ["worker_id", "kind", "address", "state", "seconds_since_heartbeat"],
                    "properties": {
                        "worker_id": {"type": "string"},
                        "kind": {"type": "string", "enum": ["collector", "learner"]},
                        "address": {"type": "string"},
                        "pid": {"type": "integer", "nullable": True},
                        "state": {
                            "type": "string",
                            "enum": ["connecting", "setting_up", "idle", "busy", "leaving", "lost", "gone"],
                        },
                        "current_task": {"type": "string", "nullable": True},
                        "seconds_since_heartbeat": {"type": "number"},
                        "unreachable_since": {
                            "type": "number",
                            "nullable": True,
                            "description": "epoch seconds since which the coordinator and this worker do "
                            "not reach each other: its last heartbeat, once it is silent "
                            "past half its lease (and while it is lost for that), or since "
                            "its heartbeats say our answers stopped reaching it; null: "
                            "they do",
                        },
                        "env_steps": {"type": "integer"},
                        "train_iter": {"type": "integer"},
                        "policy_version": {"type": "integer"},
                        "problems": {
                            "type": "array",
                            "items": {"type": "string"},
                            "description": "what the worker reports went wrong in its threads",
                        },
                        "ranks": {
                            "type": "array",
                            "items": _ref("LearnerRank"),
                            "description": "learners: the data-parallel ranks of a LearnerAggregator "
                            "(parallel.learner.world_size > 1; empty with one rank)",
                        },
                        "storage": _ref("StorageHealth"),
                        "time_breakdown": {
                            "type": "object",
                            "nullable": True,
                            "description": "where the worker's time went since it was set up (its last "
                            "heartbeat's TimeBreakdown): each phase's seconds and fraction of "
                            "wall_seconds; `other` is the rest of its main loop's time; "
                            "`background` phases run beside the main loop",
                            "properties": {
                                "wall_seconds": {"type": "number"},
                                "phases": {"type": "object", "additionalProperties": _ref("Phase")},
                                "background": {"type": "object", "additionalProperties": _ref("Phase")},
                            },
                        },
                    },
                },
                "Phase": {
                    "type": "object",
                    "required": ["seconds", "fraction"],
                    "properties": {
                        "seconds": {"type": "number"},
                        "fraction": {"type": "number", "description": "of wall_seconds"},
                    },
                },
                "LearnerRank": {
                    "type": "object",
                    "required": ["rank", "pid", "state"],
                    "properties": {
                        "rank": {"type": "integer"},
                        "pid": {
                            "type": "integer",
                            "nullable": True,
                            "description": "on its own host; null for a rank started elsewhere",
                        },
                        "state": {"type": "string", "enum": ["starting", "running", "lost", "stopped"]},
                    },
                },
                "StorageHealth": {
                    "type": "object",
                    "required": ["healthy", "error", "since", "faults"],
                    "description": "the shared store as one process sees it: unhealthy from a failed read or write "
                    "(disk full, I/O error, object store down) until a write succeeds again",
                    "properties": {
                        "healthy": {"type": "boolean"},
                        "error": {"type": "string", "nullable": True, "description": "the last fault"},
                        "since": {
                            "type": "number",
                            "nullable": True,
                            "description": "epoch seconds of the first fault since it last worked",
                        },
                        "faults": {
                            "type": "integer",
                            "minimum": 0,
                            "description": "faults ever (a report with fewer is stale)",
                        },
                        "failures": {
                            "type": "integer",
                            "minimum": 0,
                            "description": "tasks failed on the store in a row (they set the backoff)",
                        },
                    },
                },
                "Buffer": {
                    "type": "object",
                    "required": ["name", "size", "capacity", "pushed", "sampled", "evicted"],
                    "properties": {
                        k: {"type": "number"}
                        for k in (
                            "size",
                            "capacity",
                            "pushed",
                            "sampled",
                            "evicted",
                            "dropped_stale",
                            "staleness",
                            "chunks",
                            "chunks_quarantined",
                            "rows_quarantined",
                        )
                    },
                },
                "Numbers": {
                    "oneOf": [
                        {"type": "array", "items": {"type": "number"}},
                        {
                            "type": "object",
                            "required": ["dtype", "base64"],
                            "description": "little-endian bytes",
                            "properties": {
                                "dtype": {"type": "string", "enum": list(PACKED_DTYPES)},
                                "base64": {"type": "string", "format": "byte"},
                            },
                        },
                    ]
                },
                "Control": {
                    "type": "object",
                    "properties": {
                        "policy_version": {"type": "integer"},
                        "epsilon": {"type": "number"},
                        "stop": {"type": "boolean"},
                        "env_steps": {"type": "integer"},
                        "allowed_env_steps": {"type": "integer", "nullable": True},
                        "segment_env_steps": {
                            "type": "integer",
                            "nullable": True,
                            "description": "on-policy: env steps this collector may collect in all "
                            "with policy_version (its share of the segment)",
                        },
                        "segment_round": {
                            "type": "integer",
                            "description": "on-policy: segments restart with each learner task",
                        },
                        "cancel_tasks": {
                            "type": "array",
                            "items": {"type": "string"},
                            "description": "tasks the worker holds that this coordinator never issued "
                            "(issued by a process before a restart): stop them",
                        },
                    },
                },
            },
        },
        "paths": {
            "/health": {
                "get": {
                    "summary": "liveness",
                    "responses": {
                        "200": _json(
                            {"type": "object", "properties": {"status": {"type": "string", "enum": ["ok"]}}}, "alive"
                        )
                    },
                }
            },
            "/openapi.json": {
                "get": {"summary": "this document", "responses": {"200": _json({"type": "object"}, "OpenAPI 3")}}
            },
            "/cluster": {
                "get": {
                    "summary": "cluster summary",
                    "responses": {
                        "200": _json(
                            {
                                "type": "object",
                                "required": [
                                    "state",
                                    "workers",
                                    "tasks",
                                    "env_steps",
                                    "train_iter",
                                    "policy_version",
                                    "last_eval_return",
                                    "best_eval_return",
                                    "stop_value",
                                    "uptime",
                                ],
                                "properties": {
                                    "stop_value": {
                                        "type": "number",
                                        "nullable": True,
                                        "description": "the eval return that ends the run (solved); null: none, the run "
                                        "trains to its budget",
                                    },
                                    "state_saved_at": {
                                        "type": "number",
                                        "nullable": True,
                                        "description": "epoch seconds of the newest snapshot of the coordinator's "
                                        "state on the shared disk",
                                    },
                                    "workers_forgotten": {
                                        "type": "integer",
                                        "description": "lost or gone workers no longer listed (after "
                                        "parallel.coordinator.worker_retention, or beyond "
                                        "max_ended_workers)",
                                    },
                                    "resumed_from": {
                                        "type": "integer",
                                        "nullable": True,
                                        "description": "the saved state this coordinator resumed (its sequence "
                                        "number), null when it started fresh",
                                    },
                                    "bottleneck": {
                                        "type": "string",
                                        "description": "which side holds the other up and what to do, in one line, "
                                        "from the active workers' time breakdowns (docs/scaling.md)",
                                    },
                                    "unreachable": {
                                        "type": "array",
                                        "description": "the workers the coordinator does not "
                                        "reach now (a network partition, a stopped host), oldest fault first; a lost "
                                        "one leaves the list when its address registers again",
                                        "items": {
                                            "type": "object",
                                            "properties": {
                                                "worker_id": {"type": "string"},
                                                "kind": {"type": "string"},
                                                "address": {"type": "string"},
                                                "state": {"type": "string"},
                                                "since": {"type": "number", "description": "epoch seconds"},
                                                "seconds": {"type": "number", "description": "how long, until now"},
                                            },
                                        },
                                    },
                                    "storage": {
                                        "type": "object",
                                        "required": ["healthy", "error", "since", "workers"],
                                        "description": "the shared store's health: unhealthy while any active worker (or "
                                        "the coordinator's own snapshots) reports it failing",
                                        "properties": {
                                            "healthy": {"type": "boolean"},
                                            "error": {
                                                "type": "string",
                                                "nullable": True,
                                                "description": "the fault of the earliest failing process",
                                            },
                                            "since": {
                                                "type": "number",
                                                "nullable": True,
                                                "description": "epoch seconds of the earliest fault",
                                            },
                                            "workers": {
                                                "type": "array",
                                                "items": {"type": "string"},
                                                "description": "the failing processes: worker ids, and "
                                                "'coordinator' for its snapshots",
                                            },
                                        },
                                    },
                                },
                            },
                            "summary",
                        )
                    },
                }
            },
            "/cluster/history": {
                "get": {
                    "summary": "time series for charts: evaluations and throughput samples",
                    "responses": {
                        "200": _json(
                            {
                                "type": "object",
                                "properties": {
                                    "eval": {"type": "array", "items": {"type": "object"}},
                                    "throughput": {"type": "array", "items": {"type": "object"}},
                                    "stop_value": {"type": "number", "nullable": True},
                                },
                            },
                            "history",
                        )
                    },
                }
            },
            "/tasks": {
                "get": {
                    "summary": "list tasks (newest last)",
                    "parameters": [
                        {
                            "name": "kind",
                            "in": "query",
                            "schema": {"type": "string", "enum": ["collector", "learner", "evaluator"]},
                        },
                        {
                            "name": "state",
                            "in": "query",
                            "schema": {
                                "type": "string",
                                "enum": ["pending", "running", "finished", "failed", "cancelled"],
                            },
                        },
                        {"name": "limit", "in": "query", "schema": {"type": "integer", "minimum": 1, "maximum": 1000}},
                        {"name": "offset", "in": "query", "schema": {"type": "integer", "minimum": 0}},
                    ],
                    "responses": {
                        "200": _json(
                            {
                                "type": "object",
                                "properties": {
                                    "tasks": {"type": "array", "items": _ref("Task")},
                                    "total": {"type": "integer"},
                                },
                            },
                            "a page",
                        ),
                        **_errors("400"),
                    },
                }
            },
            "/tasks/{task_id}": {
                "get": {
                    "summary": "one task",
                    "parameters": [_path_param("task_id")],
                    "responses": {"200": _json(_ref("Task"), "the task"), **_errors("404")},
                }
            },
            "/workers": {
                "get": {
                    "summary": "list every worker, collectors and learners (a learner's data-parallel "
                    "ranks are listed in it)",
                    "responses": {
                        "200": _json(
                            {"type": "object", "properties": {"workers": {"type": "array", "items": _ref("Worker")}}},
                            "workers",
                        )
                    },
                }
            },
            "/{collection}": {
                "get": {
                    "summary": "list collectors or learners",
                    "parameters": [worker_collection],
                    "responses": {"200": _json({"type": "object"}, "workers"), **_errors("404")},
                },
                "post": {
                    "summary": "add a running slave by URL (the coordinator connects to it); without an "
                    "address, a coordinator inside `parallel-rl run` starts one more process",
                    "security": AUTH,
                    "parameters": [worker_collection],
                    "requestBody": _body("Registration"),
                    "responses": {
                        "201": _json(_ref("Worker"), "registered"),
                        "202": _json(
                            {
                                "type": "object",
                                "properties": {
                                    "worker_id": {"type": "string"},
                                    "kind": {"type": "string"},
                                    "state": {"type": "string", "enum": ["starting"]},
                                },
                            },
                            "no address: `parallel-rl run` starts the process, which registers itself as worker_id",
                        ),
                        "409": _json(_ref("Error"), "address already registered"),
                        "422": _json(
                            _ref("Error"),
                            "the slave cannot be reached, is not a parallel_rl "
                            "worker (code unreachable), or did not prove it "
                            "holds the cluster token (code unproven): the "
                            "coordinator sends the token only to a slave that "
                            "answered its challenge",
                        ),
                        **_errors("400", "401", "403", "404", "413"),
                    },
                },
            },
            "/{collection}/{worker_id}": {
                "get": {
                    "summary": "one worker",
                    "parameters": [worker_collection, _path_param("worker_id")],
                    "responses": {"200": _json(_ref("Worker"), "the worker"), **_errors("404")},
                },
                "delete": {
                    "summary": "remove a worker: no new tasks, its running task wraps up, its data stays",
                    "security": AUTH,
                    "parameters": [worker_collection, _path_param("worker_id")],
                    "responses": {
                        "200": _json(_ref("Worker"), "leaving or gone"),
                        "409": _json(_ref("Error"), "already gone"),
                        **_errors("401", "403", "404"),
                    },
                },
            },
            "/buffers": {
                "get": {
                    "summary": "replay buffers",
                    "responses": {
                        "200": _json(
                            {"type": "object", "properties": {"buffers": {"type": "array", "items": _ref("Buffer")}}},
                            "buffers",
                        )
                    },
                }
            },
            "/league": {
                "get": {
                    "summary": "two-player self-play: the opponent league (players, pool, payoff "
                    "table of wins/draws/losses per pair, games played)",
                    "responses": {"200": _json(_ref("League"), "the league"), **_errors("404")},
                }
            },
            "/videos": {
                "get": {
                    "summary": "recorded evaluation episodes, newest first (policy.eval.evaluator.record_every)",
                    "responses": {
                        "200": _json(
                            {
                                "type": "object",
                                "properties": {
                                    "videos": {
                                        "type": "array",
                                        "items": {
                                            "type": "object",
                                            "properties": {
                                                "name": {"type": "string"},
                                                "policy_version": {"type": "integer"},
                                                "created": {"type": "number"},
                                                "url": {"type": "string"},
                                            },
                                        },
                                    }
                                },
                            },
                            "the videos",
                        )
                    },
                }
            },
            "/videos/{name}": {
                "get": {
                    "summary": "one video (video/mp4; range requests)",
                    "parameters": [_path_param("name")],
                    "responses": {
                        "200": {
                            "description": "the MP4",
                            "content": {"video/mp4": {"schema": {"type": "string", "format": "binary"}}},
                        },
                        **_errors("404"),
                    },
                }
            },
            "/buffers/{name}": {
                "get": {
                    "summary": "one buffer",
                    "parameters": [_path_param("name")],
                    "responses": {"200": _json(_ref("Buffer"), "the buffer"), **_errors("404")},
                }
            },
            "/buffers/{name}/sample": {
                "post": {
                    "summary": "learner traffic: references for the next batches; carries priorities of past ones",
                    "security": AUTH,
                    "parameters": [_path_param("name")],
                    "requestBody": _body("SampleRequest"),
                    "responses": {
                        "200": _json(_ref("SampleAnswer"), "references"),
                        **_errors("400", "401", "403", "404", "413"),
                    },
                }
            },
            "/workers/{worker_id}/heartbeat": {
                "post": {
                    "summary": "worker traffic: renew the lease (needs the worker's lease token in "
                    "X-Parallel-RL-Lease)",
                    "security": AUTH,
                    "description": 'optional body, a Heartbeat {"problems": [str], "tasks": [str], "ranks": '
                    '[LearnerRank], "storage": StorageReport, "time_breakdown": TimeBreakdown}: '
                    "what went wrong in the "
                    "worker's threads (shown under the worker's `problems`), and the ids of the tasks "
                    "it holds (queued, running, or with an end report not yet delivered; after a "
                    "coordinator restart a saved running task it no longer holds is failed and issued "
                    "again, and one this coordinator never issued comes back in the control block's "
                    "`cancel_tasks`); a LearnerAggregator adds its ranks (shown under the learner's "
                    "`ranks`); `storage`, a StorageHealth: the shared store as the worker sees it (shown "
                    "under the worker's `storage` and in `/cluster`); `time_breakdown`: where its "
                    "time went since it was set up (shown under the worker's `time_breakdown`, and "
                    "the cluster's `bottleneck`)",
                    "parameters": [_path_param("worker_id")],
                    "responses": {"200": _json(_ref("Control"), "control block"), **_errors("401", "403", "404")},
                }
            },
            "/workers/{worker_id}/metadata": {
                "post": {
                    "summary": f"worker traffic: a batch of messages ({', '.join(protocol.MESSAGES)})",
                    "security": AUTH,
                    "parameters": [_path_param("worker_id")],
                    "requestBody": _body("MetadataBatch"),
                    "responses": {
                        "200": _json(
                            {
                                "type": "object",
                                "required": ["control", "refused"],
                                "properties": {
                                    "control": _ref("Control"),
                                    "refused": {
                                        "type": "array",
                                        "description": "the messages refused (the rest were applied)",
                                        "items": {
                                            "type": "object",
                                            "required": ["index", "code", "message"],
                                            "properties": {
                                                "index": {"type": "integer"},
                                                "type": {"type": "string", "nullable": True},
                                                "code": {"type": "string"},
                                                "message": {"type": "string"},
                                            },
                                        },
                                    },
                                },
                            },
                            "control block and refusals",
                        ),
                        **_errors("400", "401", "403", "404", "413"),
                    },
                }
            },
        },
    }


def _query_params(cls) -> List[Dict[str, Any]]:
    """The query parameters of a query dataclass (``protocol.CompareQuery``): names, types, limits and docs from its
    fields (a list travels comma-separated, as one string)."""
    params = []
    for f in dataclasses.fields(cls):
        hint = typing.get_type_hints(cls)[f.name]
        schema = {"type": "string"} if typing.get_origin(hint) is list else _type_schema(hint)
        schema.pop("nullable", None)
        for key, name in (("lo", "minimum"), ("hi", "maximum")):
            if f.metadata.get(key) is not None:
                schema[name] = f.metadata[key]
        choices = {"group": protocol.COMPARE_GROUPS, "format": protocol.COMPARE_FORMATS}.get(f.name)
        if choices:
            schema["enum"] = list(choices)
        if f.default is not dataclasses.MISSING and f.default is not None:
            schema["default"] = f.default
        required = f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
        params.append(
            {"name": f.name, "in": "query", "required": required, "description": f.metadata["doc"], "schema": schema}
        )
    return params


def service_openapi_document(version: str) -> Dict[str, Any]:
    """The OpenAPI document of the service (``parallel-rl serve``: runs and the pool), at its
    ``/api/v1/openapi.json``; each run's coordinator serves :func:`openapi_document` on its own port."""
    base = openapi_document(version)
    schemas = base["components"]["schemas"]
    run = {
        "type": "object",
        "required": ["id", "name", "state", "weight", "env_steps", "workers"],
        "properties": {
            "id": {"type": "string", "description": "run-N"},
            "name": {"type": "string"},
            "state": {"type": "string", "enum": ["queued", "running", "solved", "stopped", "failed"]},
            "reason": {"type": "string", "description": "how it ended (one line)"},
            "weight": {"type": "number"},
            "env_steps": {"type": "integer"},
            "last_eval_return": {"type": "number", "nullable": True},
            "best_eval_return": {"type": "number", "nullable": True},
            "workers": {
                "type": "object",
                "description": "slots it holds now",
                "properties": {"learners": {"type": "integer"}, "collectors": {"type": "integer"}},
            },
            "url": {
                "type": "string",
                "nullable": True,
                "description": "its coordinator's address while it runs: every endpoint of a one-run cluster",
            },
            "dir": {"type": "string", "description": "its experiment directory (shared store: shared/ in it)"},
            "config": {"type": "string"},
            "overrides": {"type": "array", "items": {"type": "string"}},
            "created_at": {"type": "number"},
        },
    }
    detail = {
        "allOf": [
            _ref("Run"),
            {
                "type": "object",
                "properties": {
                    "summary": {"type": "object", "description": "its coordinator's GET /cluster"},
                    "curve": {"type": "array", "items": {"type": "object"}, "description": "its evaluations"},
                    "tasks": {"type": "array", "items": _ref("Task"), "description": "its newest 100 tasks"},
                },
            },
        ]
    }
    pool = {
        "type": "object",
        "properties": {
            "learners": {"type": "integer", "description": "learner slots"},
            "collectors": {"type": "integer", "description": "collector slots"},
            "min_collectors": {"type": "integer"},
            "held": {"type": "object", "description": "slots held by running runs, by kind"},
            "runs": {"type": "object", "description": "runs by state"},
            "busy_seconds": {"type": "number"},
            "available_seconds": {"type": "number"},
            "busy_fraction": {
                "type": "number",
                "nullable": True,
                "description": "slot-seconds held by a running worker / slot-seconds available, while a run "
                "ran or waited",
            },
        },
    }
    number = {"type": "number", "nullable": True}
    comparison = {
        "type": "object",
        "properties": {
            "env_step": {"type": "number", "description": "the env step every run is scored at"},
            "scored_at": {"type": "string", "description": "at_env_step, or the smallest final env step"},
            "reps": {"type": "integer"},
            "seed": {"type": "integer"},
            "confidence": {"type": "number"},
            "groups": {
                "type": "array",
                "items": {
                    "type": "object",
                    "properties": {
                        "name": {"type": "string"},
                        "runs": {"type": "array", "items": {"type": "object"}, "description": "id, final score"},
                        "iqm": number,
                        "ci": {"type": "array", "items": number, "description": "[low, high], 95 %"},
                        "median": number,
                        "mean": number,
                        "note": {"type": "string"},
                        "curve": {
                            "type": "object",
                            "description": "the mean over runs and its 95 % bootstrap band on a common env-step grid",
                            "properties": {
                                k: {"type": "array", "items": number} for k in ("env_steps", "mean", "low", "high")
                            },
                        },
                    },
                },
            },
        },
    }
    collection = {"name": "collection", "in": "path", "required": True, "schema": {"type": "string"}}
    workers = {"type": "object", "additionalProperties": {"type": "array", "items": _ref("Worker")}}
    paths = {
        "/health": base["paths"]["/health"],
        "/runs": {
            "get": {
                "summary": "every run: id, name, state, env steps, last evaluation, slots held",
                "responses": {
                    "200": _json(
                        {"type": "object", "properties": {"runs": {"type": "array", "items": _ref("Run")}}},
                        "the runs, in submission order",
                    )
                },
            },
            "post": {
                "summary": "submit a run: queued, started when the pool has a learner and its minimum of collectors",
                "security": AUTH,
                "requestBody": _body("RunSubmission"),
                "responses": {"201": _json(_ref("Run"), "the run"), **_errors("400", "401", "403", "413")},
            },
        },
        "/runs/{run_id}": {
            "parameters": [_path_param("run_id")],
            "get": {
                "summary": "one run: its row, its coordinator's summary, eval curve and newest tasks",
                "responses": {"200": _json(detail, "the run"), **_errors("404")},
            },
            "delete": {
                "summary": "stop a run (queued: at once; running: it saves and its workers leave); its data stays",
                "security": AUTH,
                "responses": {"200": _json(_ref("Run"), "the run"), **_errors("401", "403", "404")},
            },
        },
        "/compare": {
            "get": {
                "summary": "groups of runs as `parallel-rl compare` reports them: final scores as IQM with a 95 % "
                "bootstrap CI, mean curves with 95 % bootstrap bands; format=csv: the CLI's CSV. A run whose config "
                "closes reads (auth_read) needs the token",
                "parameters": _query_params(protocol.CompareQuery),
                "responses": {
                    "200": {
                        "description": "per group: runs, iqm, ci, median, mean, note, curve (env_steps, mean, low, "
                        "high); the CSV with format=csv",
                        "content": {
                            "application/json": {"schema": _ref("Comparison")},
                            "text/csv": {"schema": {"type": "string"}},
                        },
                    },
                    **_errors("400", "401", "403", "404"),
                    "409": _json(_ref("Error"), "a run has no evaluation to compare yet"),
                    "429": _json(_ref("Error"), "2 comparisons are being computed; try again shortly"),
                },
            }
        },
        "/pool": {
            "get": {
                "summary": "slots, what the runs hold, the busy fraction",
                "responses": {"200": _json(_ref("Pool"), "the pool")},
            }
        },
        "/{collection}": {
            "parameters": [collection],
            "get": {
                "summary": "the running runs' workers, each id RUN:WORKER",
                "responses": {"200": _json(workers, "workers"), **_errors("404")},
            },
            "post": {
                "summary": "one more slot of the kind in the pool (no address: the service starts its workers)",
                "security": AUTH,
                "requestBody": _body("Registration"),
                "responses": {"202": _json({"type": "object"}, "the slot count"), **_errors("400", "401", "403")},
            },
        },
        "/{collection}/{worker_id}": {
            "parameters": [collection, _path_param("worker_id")],
            "delete": {
                "summary": "remove collector RUN:WORKER from its run and one collector slot from the pool "
                "(learners: 409, stop the run instead)",
                "security": AUTH,
                "responses": {"200": _json(_ref("Worker"), "the worker"), **_errors("401", "403", "404")},
            },
        },
        "/openapi.json": {"get": {"summary": "this document", "responses": {"200": {"description": "OpenAPI 3"}}}},
    }
    return {
        **base,
        "info": {**base["info"], "title": "parallel_rl service (runs and the pool)"},
        "components": {
            **base["components"],
            "schemas": {**schemas, "Run": run, "Pool": pool, "Comparison": comparison},
        },
        "paths": paths,
    }
