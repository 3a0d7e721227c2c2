"""The coordinator's parts (#22 item 1): the commander behind its declared interface, and the parts' refusals as
domain errors with the status, code and words the REST API has always answered. No server: plain calls."""

from __future__ import annotations

import pytest

from parallel_rl.coordinator import Commander, CommanderHandle, Coordinator
from parallel_rl.coordinator.flow_control import Admission
from parallel_rl.errors import NotFoundError, ProtocolViolation, UnavailableError, UnreachableError
from parallel_rl.storage import SharedStorage
from tests.support import toy_cluster_config


@pytest.fixture
def coordinator(tmp_path):
    coordinator = Coordinator(toy_cluster_config(tmp_path), SharedStorage(str(tmp_path / "shared")), "t")
    yield coordinator
    coordinator.close(notify_workers=False)


def test_the_commander_holds_a_handle_not_the_coordinator(coordinator):
    commander = coordinator.commander
    assert isinstance(commander, Commander)
    assert isinstance(commander.cluster, CommanderHandle) and not hasattr(commander, "coordinator")
    handle = commander.cluster
    assert handle.policy_version == -1 and not handle.over and handle.workers() == []
    handle.finish("failed", "the commander gave up")
    summary = coordinator.summary()
    assert (summary["state"], summary["reason"]) == ("failed", "the commander gave up") and handle.over


def test_refusals_keep_their_status_code_and_words(coordinator):
    with pytest.raises(NotFoundError, match="unknown worker kind 'evaluator'") as refused:
        coordinator.membership.add_worker("evaluator", "http://127.0.0.1:1")
    assert (refused.value.http_status, refused.value.code) == (404, "not_found")
    with pytest.raises(ProtocolViolation, match="address must look like http://HOST:PORT") as refused:
        coordinator.membership.add_worker("collector", "127.0.0.1")
    assert (refused.value.http_status, refused.value.code) == (400, "bad_request")
    with pytest.raises(UnreachableError, match="cannot reach a collector at http://127.0.0.1:1") as refused:
        coordinator.membership.add_worker("collector", "http://127.0.0.1:1")
    assert (refused.value.http_status, refused.value.code) == (422, "unreachable")
    with pytest.raises(NotFoundError, match="is not registered with this lease"):
        coordinator.membership.heartbeat("collector-9", "no-lease")
    with pytest.raises(NotFoundError, match="no collector 'collector-9'"):
        coordinator.membership.remove_worker("collector-9", "collector")


def test_admission_refuses_with_503_when_every_turn_is_taken():
    admission = Admission(1, timeout=0.01)
    admission.enter()
    with pytest.raises(UnavailableError, match="no metadata batch was admitted within 0.01s") as refused:
        admission.enter()
    assert (refused.value.http_status, refused.value.code) == (503, "unavailable")
    admission.leave()
    admission.enter()  # the turn given back is taken again
