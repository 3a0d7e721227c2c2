"""Fuzzing every HTTP route (issue #41): a real coordinator, a real slave and a real service (`parallel-rl serve`'s
app, over ended runs with evaluations: its compare view computes) on 127.0.0.1, every route of their Flask url maps
(a new route is fuzzed without a line here), with and without the cluster token, bodies made
from the protocol's dataclasses and then mutated (wrong types, huge and non-finite numbers, deep nesting, long
strings), random query strings and path segments. Whatever comes in, the answer is 2xx, 3xx or a 4xx with the
JSON error shape and a one-line message; never a 5xx. Afterwards each server still answers its health check and
the process runs the threads it ran before."""

from __future__ import annotations

import dataclasses
import json
import threading
import typing
from urllib.parse import quote, urlencode

import pytest
import requests
from hypothesis import HealthCheck, event, example, given, settings
from hypothesis import strategies as st

from coordinator_app import create_app
from parallel_rl.protocol import BODIES, MESSAGES
from parallel_rl.transport import LEASE_HEADER
from tests.support import eventually
from tests.test_coordinator import TOKEN, ScriptedSlave

# ---- values: JSON of every kind, and the ones that break naive readers -------------------------------------
HUGE_INTS = st.sampled_from([2**31, 2**53 + 1, 2**63, 2**64, 10**400, -(10**400), -1, 0])
ODD_FLOATS = st.sampled_from([float("nan"), float("inf"), -float("inf"), 1e308, -1e308, 5e-324, -0.0])
NUMBERS = st.one_of(st.integers(), HUGE_INTS, st.floats(), ODD_FLOATS)
TEXT = st.one_of(
    st.text(max_size=40),
    st.sampled_from(["", "x" * 5000, "../../etc/passwd", "/etc/passwd", "a\nb", "\x00", "%2e%2e", "😀" * 10]),
)
SCALARS = st.one_of(st.none(), st.booleans(), NUMBERS, TEXT)
JSON = st.recursive(
    SCALARS,
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(TEXT, inner, max_size=4)),
    max_leaves=12,
)


def deep(n: int, opener: str = "[", closer: str = "]") -> str:
    return opener * n + closer * n


ADDRESSES = st.one_of(
    st.sampled_from(
        [
            "http://[::1:1",
            "http://127.0.0.1:99999",
            "http://127.0.0.1:-1",
            "http://127.0.0.1:0",
            "http://127.0.0.1",
            "ftp://127.0.0.1:1",
            "http://:1",
            "http://127.0.0.1:1x",
            "http://127.0.0.1:1/",
        ]
    ),
    st.integers(1, 65535).map(lambda p: f"http://127.0.0.1:{p}"),
    TEXT,
)


def value_of(hint, name: str = "") -> st.SearchStrategy:
    """A value of the type ``hint`` names (the field's own type: a near-valid body). Waits stay short (a long
    poll up to its 10 s cap is no bug, only a slow example)."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is typing.Union:
        return st.one_of(*[value_of(a, name) for a in args])
    if hint is type(None):
        return st.none()
    if hint is bool:
        return st.booleans()
    if hint is int:
        return st.one_of(st.integers(-2, 100), HUGE_INTS)
    if hint is float:
        if "wait" in name:
            return st.one_of(st.floats(-5, 0.2), st.sampled_from([float("nan"), -float("inf"), -1e308]))
        return st.one_of(st.floats(-1, 20), ODD_FLOATS)
    if hint is str:
        return TEXT
    if origin in (list, typing.List):
        return st.lists(value_of(args[0]) if args else JSON, max_size=4)
    if origin in (dict, typing.Dict):
        return st.dictionaries(TEXT, value_of(args[1]) if args and args[1] is not typing.Any else JSON, max_size=4)
    if dataclasses.is_dataclass(hint):
        return body_of(hint)
    return JSON


def body_of(cls, **given) -> st.SearchStrategy:
    """A body of dataclass ``cls``: each field of its type, or left out, or of any JSON type (``given``: the
    strategies of some fields)."""
    hints = typing.get_type_hints(cls)
    fields = {f.name: st.one_of(value_of(hints[f.name], f.name), JSON) for f in dataclasses.fields(cls)}
    fields.update(given)
    body = st.fixed_dictionaries({}, optional=fields)
    if cls in MESSAGES.values():
        body = body.map(lambda b: {"type": cls.TYPE, **b})
    return body


BY_NAME = {cls.__name__: cls for cls in BODIES}
MESSAGE_BODIES = st.one_of(*[body_of(cls) for cls in MESSAGES.values()])
# each route's own body, near-valid: what its view reads (the slave's have no dataclass: their fields as its
# views read them); other routes get any of them
ROUTE_BODIES = {
    "workers.add_worker": st.one_of(
        body_of(BY_NAME["Registration"]), body_of(BY_NAME["Registration"], address=ADDRESSES)
    ),
    "workers.heartbeat": body_of(BY_NAME["Heartbeat"]),
    "workers.metadata": st.one_of(
        body_of(BY_NAME["MetadataBatch"]),
        body_of(BY_NAME["MetadataBatch"], messages=st.lists(MESSAGE_BODIES, max_size=4)),
    ),
    "buffers.sample": body_of(BY_NAME["SampleRequest"]),
    "connect": st.fixed_dictionaries(
        {},
        optional={
            "worker_id": TEXT,
            "config": st.one_of(st.just({}), JSON),
            "coordinator": TEXT,
            "shared_dir": TEXT,
            "lease": TEXT,
            "heartbeat_interval": NUMBERS,
            "heartbeat_ttl": NUMBERS,
        },
    ),
    "start_task": st.fixed_dictionaries({}, optional={"task_id": TEXT, "kind": TEXT, "spec": JSON}),
    "disconnect": st.fixed_dictionaries({}, optional={"reason": JSON}),
    "service.submit_run": body_of(BY_NAME["RunSubmission"]),
}
ANY_BODY = st.one_of(*ROUTE_BODIES.values(), *[body_of(cls) for cls in BODIES], MESSAGE_BODIES, JSON)


def encoded(value) -> bytes:
    return json.dumps(value, allow_nan=True).encode()


ODD_BODIES = st.one_of(
    st.sampled_from(
        [
            b"",
            b"{",
            b"null",
            b"[]",
            b"\xff\xfe",
            b'{"a": NaN}',
            b'{"a": Infinity}',
            b"1e999",
            deep(100000).encode(),
            ('{"a":' * 3000 + "1" + "}" * 3000).encode(),
        ]
    ),
    st.binary(max_size=64),
)

# ---- requests --------------------------------------------------------------------------------------------
SEGMENTS = st.one_of(
    TEXT.map(lambda s: quote(s, safe="") if s not in ("", ".", "..") else "x"),
    st.sampled_from(
        [
            "collectors",
            "learners",
            "collector-1",
            "learner-1",
            "%2e%2e",
            "..%2f..%2fetc",
            "video_000000001.mp4",
            "dashboard.html",
            "..%2f__init__.py",
        ]
    ),
)
QUERIES = st.dictionaries(
    st.sampled_from(["kind", "state", "limit", "offset", "challenge", "x", ""])
    | st.sampled_from(["runs", "group", "format", "reps", "seed", "at_env_step"]),  # the service's compare
    st.one_of(
        TEXT,
        st.integers().map(str),
        st.sampled_from(["-1", "1e9", "nan", "99999999999999999999999"]),
        st.sampled_from(["run-1", "run-1,run-2", "run-2,run-3", "run-1,run-1", ",", "name", "config", "csv", "150"]),
    ),
    max_size=3,
)


# what a token holder may legitimately send to take the slave out of the run (it then exits, as designed): drawn
# with a wrong token, so that one example's slave is there for the next (the long profile drew them, and every
# later example met a slave that had gone)
LETS_THE_SLAVE_GO = {"disconnect", "connect", "workers.remove_worker"}


def routes(app) -> list:
    """(rule, endpoint, method) of every route of ``app`` (HEAD and OPTIONS are Flask's own)."""
    return sorted(
        (rule.rule, rule.endpoint, method)
        for rule in app.url_map.iter_rules()
        for method in rule.methods - {"HEAD", "OPTIONS"}
    )


def fill(rule: str, segments: list) -> str:
    """``rule`` with each ``<converter:name>`` replaced by a segment."""
    parts = rule.replace(">", "<").split("<")
    return "".join(segments[(n // 2) % len(segments)] if n % 2 else part for n, part in enumerate(parts))


@pytest.fixture
def service_server(tmp_path):
    """The service's app on a real server, as `parallel-rl serve` serves it (its pool's loop not started: nothing
    trains), over run-1 and run-2 (ended, evaluated) and run-3 (its reads closed)."""
    from coordinator_app.service import serve_service
    from parallel_rl.after.compare import service_comparison
    from parallel_rl.service.runs import save_records
    from parallel_rl.service.service import Service
    from tests.test_compare_view import CONFIG, ended_run

    where = tmp_path / "svc"
    records = [ended_run(where, f"run-{i}", f"cart_s{i}", float(i), {**CONFIG, "seed": i}) for i in (1, 2)]
    records.append(ended_run(where, "run-3", "closed", 3.0, CONFIG, auth_read=True))
    save_records(str(where), records, 4)
    service = Service(str(where), learners=1, collectors=1)
    server = serve_service(service, "127.0.0.1", 0, TOKEN, service_comparison).start()
    yield server
    server.close()
    service.close()


@pytest.fixture
def servers(coordinator_factory, tmp_path, service_server):
    """A coordinator, a collector slave registered with it (the slave's client sends the token and its lease),
    the service, and every route of the three."""
    from coordinator_app.service import create_service_app

    coordinator, server = coordinator_factory()
    slave = ScriptedSlave("collector", server.url, shared_dir=str(tmp_path / "shared"))
    slave.start()
    runner = threading.Thread(target=slave.run, daemon=True)
    runner.start()
    eventually(lambda: slave.connected.is_set(), message="the slave registered")
    session = requests.Session()
    targets = (
        [(server.url, *route) for route in routes(create_app())]
        + [(slave.server.url, *route) for route in routes(slave.app)]
        + [(service_server.url, *route) for route in routes(create_service_app())]
    )
    healths = (
        server.url + "/api/v1/health",
        slave.server.url + "/slave/v1/health",
        service_server.url + "/api/v1/health",
    )
    yield session, targets, slave, healths
    session.close()
    for ev in slave.finish.values():
        ev.set()
    slave.request_stop()
    slave.close()
    runner.join(10)


def check_answer(answer: requests.Response, what: str) -> None:
    assert answer.status_code < 500, f"{what} -> {answer.status_code}: {answer.text[:500]}"
    if answer.status_code >= 400:
        error = answer.json()["error"]
        assert isinstance(error["code"], str) and isinstance(error["message"], str), (what, error)
        assert "\n" not in error["message"] and "Traceback" not in error["message"], (what, error)


@settings(suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow], deadline=None)
@given(data=st.data())
@example(data=None)  # the address finding (#41, 8): every bad address of POST /collectors is a 400
def test_fuzz_every_route_answers_4xx_json_never_5xx(servers, data):
    session, targets, slave, healths = servers
    token_header = {"Authorization": f"Bearer {TOKEN}"}
    if data is None:
        for address in ["http://[::1:1", "http://127.0.0.1:99999", "http://127.0.0.1:-1", "http://127.0.0.1:0"]:
            answer = session.post(
                healths[0].replace("/health", "/collectors"),
                json={"address": address},
                headers=token_header,
                timeout=30,
            )
            check_answer(answer, f"POST /collectors {address}")
            assert answer.status_code == 400 and address in answer.json()["error"]["message"], answer.text
        return
    threads = threading.active_count()
    base, rule, endpoint, method = data.draw(st.sampled_from(targets), label="route")
    own = [slave.worker_id or "collector-1", "default", "collectors", "learners", "run-1"]  # names the servers know
    segments = data.draw(st.lists(st.one_of(st.sampled_from(own), SEGMENTS), min_size=1, max_size=3), label="path")
    path = fill(rule, segments)
    query = data.draw(QUERIES, label="query")
    headers = dict(
        data.draw(
            st.sampled_from([token_header, {}, {"Authorization": "Bearer wrong"}, {"Authorization": "Basic x"}]),
            label="auth",
        )
    )
    if endpoint in LETS_THE_SLAVE_GO and headers == token_header:
        headers = {"Authorization": "Bearer wrong"}  # the servers must stay up for the next example
    lease = slave.coordinator.lease if slave.coordinator is not None else None
    if lease and data.draw(st.booleans(), label="with the worker's lease"):
        headers[LEASE_HEADER] = lease
    body = None
    if method in ("POST", "PUT", "PATCH", "DELETE"):
        own_body = ROUTE_BODIES.get(endpoint, ANY_BODY)
        body = data.draw(st.one_of(own_body.map(encoded), ANY_BODY.map(encoded), ODD_BODIES), label="body")
        headers["Content-Type"] = data.draw(
            st.sampled_from(["application/json", "application/json", "text/plain"]), label="content type"
        )
    url = base + path + ("?" + urlencode(query) if query else "")
    answer = session.request(method, url, data=body, headers=headers, timeout=30)
    check_answer(answer, f"{method} {url} {body[:300] if body else b''}")
    event(f"{method} {rule} -> {answer.status_code}")
    for health in healths:
        assert session.get(health, timeout=30).status_code == 200, health
    eventually(
        lambda: threading.active_count() <= threads,
        timeout=10,
        message=f"the thread count back to {threads} after {method} {url}",
    )


def near(valid: list, odd: list) -> st.SearchStrategy:
    """A query value: mostly one of ``valid``, else one of ``odd`` or any text (each key absent half the time)."""
    return st.one_of(*[st.sampled_from(valid)] * 4, st.one_of(st.sampled_from(odd), TEXT, st.integers().map(str)))


COMPARE_QUERIES = st.fixed_dictionaries(
    {"runs": near(["run-1", "run-1,run-2", "run-2,run-3", " run-1 , run-2 "], ["run-1,run-1", "run-9", ",", ""])},
    optional={
        "group": near(["name", "config"], ["seed", ""]),
        "format": near(["csv", "json"], ["xml", ""]),
        "reps": near(["1", "150", "5000"], ["5001", "0", "-1", "1e3", "٣", "²", "1_0", "99999999999999999999999"]),
        "seed": near(["0", "7", "4294967295"], ["4294967296", "-1", ""]),
        "at_env_step": near(["100", "250", "400", "1e9", "50", "0"], ["nan", "inf", "-1", "1e999"]),
    },
)


@settings(max_examples=80, suppress_health_check=[HealthCheck.function_scoped_fixture], deadline=None)
@given(query=COMPARE_QUERIES, token=st.booleans())
@example(query={"runs": "run-1,run-2", "format": "csv", "reps": "150"}, token=False)
@example(query={"runs": "run-2,run-3", "group": "name", "at_env_step": "250"}, token=True)
def test_fuzz_the_service_compare_query_answers_4xx_json_never_5xx(service_server, query, token):
    """The compare view's query string (the general fuzzer draws its route among all the others): whatever it
    holds, a 200 (JSON groups or the CSV) or a one-line 4xx, and the service still answers."""
    headers = {"Authorization": f"Bearer {TOKEN}"} if token else {}
    url = f"{service_server.url}/api/v1/compare?{urlencode(query)}"
    answer = requests.get(url, headers=headers, timeout=30)
    check_answer(answer, url)
    event(f"compare -> {answer.status_code}")
    if answer.status_code == 200:
        if query.get("format") == "csv":
            assert answer.text.startswith("row,group,run_dir,"), answer.text[:200]
        else:
            assert answer.json()["groups"], answer.text[:300]
    assert requests.get(f"{service_server.url}/api/v1/health", timeout=30).status_code == 200
