"""The REST API contract: OpenAPI document vs app, error shapes and codes, and a fuzz test (no 5xx)."""

import json
import re
import threading

import pytest
import requests
from parallel_rl.transport import LEASE_HEADER
from tests.support import eventually
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

TOKEN = "test-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


@pytest.fixture
def server(coordinator_factory):
    coordinator, server = coordinator_factory()
    return server


def call(server, method, path, **kw):
    return requests.request(method, server.url + "/api/v1" + path, timeout=10, **kw)


def assert_error(response, status, code):
    assert response.status_code == status, response.text
    body = response.json()
    assert set(body) == {"error"} and body["error"]["code"] == code and body["error"]["message"]


def documented(server):
    return call(server, "GET", "/openapi.json").json()


def test_openapi_matches_the_app_both_ways(server):
    from coordinator_app import create_app

    doc = documented(server)
    assert doc["openapi"].startswith("3.")
    doc_ops = {(re.sub(r"\{[^}]+\}", "X", p), m.upper()) for p, ops in doc["paths"].items() for m in ops}
    app = create_app()
    app_ops = set()
    for rule in app.url_map.iter_rules():
        if rule.rule.startswith("/api/v1"):
            path = re.sub(r"<[^>]+>", "X", rule.rule[len("/api/v1") :])
            app_ops |= {(path, m) for m in rule.methods - {"HEAD", "OPTIONS"}}
    assert doc_ops == app_ops


SAMPLE = {"collection": "collectors", "task_id": "collector-000001", "worker_id": "collector-1", "name": "default"}


def test_every_documented_get_answers(server):
    for path, ops in documented(server)["paths"].items():
        if "get" not in ops:
            continue
        url = re.sub(r"\{([^}]+)\}", lambda m: SAMPLE[m.group(1)], path)
        response = call(server, "GET", url)
        assert response.status_code in (200, 404), (path, response.text)
        assert response.headers["Content-Type"].startswith("application/json")
        if response.status_code == 404:
            assert_error(response, 404, "not_found")


def test_required_request_fields_are_enforced(server):
    for path, ops in documented(server)["paths"].items():
        for method, op in ops.items():
            body = op.get("requestBody")
            if not body:
                continue
            url = re.sub(r"\{([^}]+)\}", lambda m: SAMPLE[m.group(1)], path)
            response = call(server, method.upper(), url, json={}, headers=AUTH)
            assert response.status_code == 400, (path, response.text)
            assert "missing field" in response.json()["error"]["message"]


def test_bad_input_codes(server):
    assert_error(
        call(server, "POST", "/collectors", data="{not json", headers={**AUTH, "Content-Type": "application/json"}),
        400,
        "bad_request",
    )
    assert_error(call(server, "POST", "/collectors", json=[1, 2], headers=AUTH), 400, "bad_request")
    assert_error(call(server, "POST", "/collectors", json={"address": 5}, headers=AUTH), 400, "bad_request")
    assert_error(call(server, "POST", "/collectors", json={"address": "not a url"}, headers=AUTH), 400, "bad_request")
    assert_error(call(server, "POST", "/collectors", json={"address": "http://127.0.0.1:1"}), 401, "unauthorized")
    assert_error(
        call(
            server,
            "POST",
            "/collectors",
            json={"address": "http://127.0.0.1:1"},
            headers={"Authorization": "Bearer wrong"},
        ),
        403,
        "forbidden",
    )
    assert_error(call(server, "DELETE", "/collectors/nope", headers=AUTH), 404, "not_found")
    assert_error(call(server, "GET", "/tasks/nope"), 404, "not_found")
    assert_error(call(server, "GET", "/tasks?state=bogus"), 400, "bad_request")
    assert_error(call(server, "GET", "/tasks?limit=0"), 400, "bad_request")
    assert_error(call(server, "PUT", "/cluster"), 405, "method_not_allowed")
    assert_error(
        call(
            server,
            "POST",
            "/collectors",
            data=b"x" * (5 * 1024 * 1024),
            headers={**AUTH, "Content-Type": "application/json"},
        ),
        413,
        "payload_too_large",
    )
    assert_error(call(server, "GET", "/nothing/here"), 404, "not_found")


def test_adding_an_address_twice_conflicts(server, tmp_path):
    from parallel_rl.collector.shell import CollectorSlave

    slave = CollectorSlave(token=TOKEN, shared_dir=str(tmp_path / "shared")).start()
    try:
        first = call(server, "POST", "/collectors", json={"address": slave.address}, headers=AUTH)
        assert first.status_code == 201 and first.json()["state"] in ("setting_up", "idle", "busy")
        worker = f"/collectors/{first.json()['worker_id']}"
        # while it sets up, adding it again is the same worker (tests/test_connect.py); once ready, a conflict
        eventually(
            lambda: call(server, "GET", worker).json()["state"] in ("idle", "busy"),
            timeout=30,
            message="the collector set up",
        )
        assert_error(
            call(server, "POST", "/collectors", json={"address": slave.address}, headers=AUTH), 409, "conflict"
        )
    finally:
        slave.request_stop()
        slave.close()


def test_read_auth_when_configured(coordinator_factory):
    coordinator, server = coordinator_factory(coordinator={"auth_read": True})
    assert_error(call(server, "GET", "/cluster"), 401, "unauthorized")
    assert call(server, "GET", "/cluster", headers=AUTH).status_code == 200
    assert call(server, "GET", "/health").status_code == 200  # liveness stays open


# ---- fuzz: no input gets a 5xx -------------------------------------------------------------------
json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**40), 2**40) | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=10), children, max_size=4),
    max_leaves=12,
)
messages = st.lists(
    st.fixed_dictionaries(
        {"type": st.sampled_from(["chunk", "task_done", "task_failed", "task_cancelled", "policy", "learn_info", "x"])},
        optional={
            k: json_values
            for k in (
                "task_id",
                "chunk",
                "size",
                "policy_version",
                "version",
                "train_iter",
                "result",
                "info",
                "env_steps",
                "episode_returns",
                "error",
            )
        },
    ),
    max_size=3,
)
known_fields = [
    "address",
    "messages",
    "worker_id",
    "batch_size",
    "batches",
    "train_iter",
    "wait",
    "priorities",
    "wait_for_allowance",
    "type",
    "self",
]
bodies = st.one_of(
    json_values,
    st.dictionaries(st.sampled_from(known_fields), json_values, max_size=5),
    st.fixed_dictionaries({"messages": messages}),
    # worker addresses only ever point at loopback (a fuzz test never sends traffic elsewhere)
    st.fixed_dictionaries({"address": st.builds("http://127.0.0.1:{}".format, st.integers(1, 65535))}),
)
segments = st.sampled_from(
    [
        "collectors",
        "learners",
        "tasks",
        "buffers",
        "workers",
        "cluster",
        "health",
        "default",
        "collector-1",
        "learner-1",
        "heartbeat",
        "metadata",
        "sample",
        "openapi.json",
        "%00",
        "..",
        "x" * 300,
    ]
) | st.text(min_size=1, max_size=8)


params = {
    "collection": st.sampled_from(["collectors", "learners"]) | st.text(min_size=1, max_size=6),
    "worker_id": st.sampled_from(["collector-1", "learner-1"]) | st.text(min_size=1, max_size=6),
    "task_id": st.sampled_from(["collector-000001", "evaluator-000002"]) | st.text(min_size=1, max_size=6),
    "name": st.sampled_from(["default"]) | st.text(min_size=1, max_size=6),
}


@st.composite
def requests_(draw):
    """(method, path): mostly documented operations with plausible or random parameters, sometimes junk."""
    if draw(st.integers(0, 4)) == 0:
        method = draw(st.sampled_from(["GET", "POST", "DELETE", "PUT", "PATCH"]))
        return method, "/" + "/".join(
            requests.utils.quote(p, safe="") for p in draw(st.lists(segments, min_size=1, max_size=4))
        )
    template, method = draw(st.sampled_from(_operations()))
    path = re.sub(r"\{([^}]+)\}", lambda m: requests.utils.quote(draw(params[m.group(1)]), safe=""), template)
    return method, path


def _operations():
    from coordinator_app.openapi import openapi_document

    return sorted((p, m.upper()) for p, ops in openapi_document("test")["paths"].items() for m in ops)


@pytest.fixture
def busy_server(coordinator_factory, tmp_path):
    """A coordinator with a real collector registered as collector-1, so worker routes reach their handlers."""
    from parallel_rl.collector.shell import CollectorSlave

    coordinator, server = coordinator_factory()
    slave = CollectorSlave(token=TOKEN, shared_dir=str(tmp_path / "shared")).start()
    threading.Thread(target=slave.run, daemon=True).start()
    assert call(server, "POST", "/collectors", json={"address": slave.address}, headers=AUTH).status_code == 201
    yield server, slave.coordinator.lease
    slave.request_stop()
    slave.close()


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    request=requests_(),
    body=bodies,
    with_token=st.booleans(),
    query=st.dictionaries(st.sampled_from(["kind", "state", "limit", "offset"]), st.text(max_size=6), max_size=3),
)
def test_fuzz_never_5xx(busy_server, request, body, with_token, query):
    (server, _), (method, url) = busy_server, request
    response = call(
        server,
        method,
        url,
        params=query,
        data=json.dumps(body),
        headers={"Content-Type": "application/json", **(AUTH if with_token else {})},
    )
    assert response.status_code < 500, (method, url, body, response.text)
    if response.status_code >= 400:
        assert set(response.json()) == {"error"}


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(body=st.fixed_dictionaries({"messages": messages}) | bodies)
def test_fuzz_worker_messages_never_5xx(busy_server, body):
    """Random message batches from a registered worker: bad ones get 400, none a 5xx."""
    server, lease = busy_server
    response = call(
        server,
        "POST",
        "/workers/collector-1/metadata",
        data=json.dumps(body),
        headers={"Content-Type": "application/json", LEASE_HEADER: lease, **AUTH},
    )
    assert response.status_code in (200, 400, 404), (body, response.text)
    if response.status_code == 200:
        assert "control" in response.json()
