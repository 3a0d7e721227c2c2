"""A failing shared store (disk full, I/O errors, an object store down): a fault of the store, not a bad file or a
bug of the task; workers and the coordinator back off, and the cluster says the store is unhealthy until writes
work again."""

import errno
import os
import subprocess

import numpy as np
import pytest
import requests

from parallel_rl.errors import StorageError, StorageFaultError
from parallel_rl.storage import SharedStorage, StorageHealth, check_health_report
from tests.support import eventually
from tests.test_observability import chrome
from tests.test_operations import ENV as TOKEN_ENV, TOKEN


def columns(n=4):
    return {"obs": np.zeros((n, 4), dtype=np.float32), "action": np.arange(n) % 2}


class BrokenDataDir:
    """The chunk directory of a shared root, made to fail writes for real and then repaired.

    Root may mount: a 64 KiB tmpfs on it, filled to the last byte (writes fail with ENOSPC, a full disk); else
    the directory is moved away and a file takes its name (writes fail with ENOTDIR)."""

    def __init__(self, root):
        self.data = root / "data"
        self.data.mkdir(parents=True, exist_ok=True)
        self.mounted = (
            subprocess.run(
                ["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(self.data)], capture_output=True, timeout=10
            ).returncode
            == 0
        )
        self.errno = "ENOSPC" if self.mounted else "ENOTDIR"

    def break_it(self):
        if self.mounted:
            fd = os.open(self.data / "filler", os.O_WRONLY | os.O_CREAT)
            try:
                with pytest.raises(OSError) as full:
                    while True:  # bounded: 64 KiB
                        os.write(fd, b"\0" * 4096)
            finally:
                os.close(fd)
            assert full.value.errno == errno.ENOSPC
        else:
            self.data.rename(self.data.with_name("data.away"))
            self.data.write_bytes(b"not a directory")

    def repair(self):
        if self.mounted:  # space freed, and enough of it that the collector's chunks do not fill it again
            (self.data / "filler").unlink()
            subprocess.run(
                ["mount", "-o", "remount,size=64m", str(self.data)], check=True, capture_output=True, timeout=10
            )
        else:
            self.data.unlink()
            self.data.with_name("data.away").rename(self.data)

    def close(self):
        if self.mounted:
            subprocess.run(["umount", "-l", str(self.data)], capture_output=True, timeout=10)


@pytest.fixture
def broken_data_dir(tmp_path):
    broken = BrokenDataDir(tmp_path / "shared")
    yield broken
    broken.close()


def test_a_failing_store_is_a_fault_not_a_bad_file(tmp_path, broken_data_dir):
    store = SharedStorage(str(tmp_path / "shared"))
    store.chunks.write("c1", columns())
    with pytest.raises(FileNotFoundError):  # not there is not a fault
        store.chunks.read("gone")
    (tmp_path / "shared" / "data" / "bad.npz").write_bytes(b"PK\x03\x04 truncated")
    with pytest.raises(StorageError) as bad:
        store.chunks.read("bad")
    assert not isinstance(bad.value, StorageFaultError) and store.health.healthy  # a bad file is no fault
    (tmp_path / "shared" / "data" / "bad.npz").unlink()

    broken_data_dir.break_it()
    with pytest.raises(
        StorageFaultError, match=rf"writing a chunk failed on the shared store .*\({broken_data_dir.errno}\)"
    ):
        store.chunks.write("c2", columns())
    report = store.health.to_dict()
    assert not report["healthy"] and broken_data_dir.errno in report["error"] and report["faults"] == 1
    assert check_health_report(report) == {k: report[k] for k in ("healthy", "error", "since", "faults")}
    assert not any(p.name.startswith(".tmp-") for p in (tmp_path / "shared").rglob("*"))  # nothing half-written

    broken_data_dir.repair()
    store.chunks.write("c2", columns())
    assert store.health.healthy and store.health.faults == 1 and store.chunks.names() == ["c1", "c2"]


def test_backoff_doubles_up_to_its_cap_and_stale_reports_change_nothing():
    health = StorageHealth(name=None)
    assert [health.back_off(0.25, 1.0) for _ in range(4)] == [0.25, 0.5, 1.0, 1.0] and not health.ready
    health.fault("writing a chunk failed: ENOSPC")
    seen = StorageHealth(name=None)
    assert seen.update_from(check_health_report(health.to_dict())) and not seen.healthy
    assert not seen.update_from({"healthy": True, "error": None, "since": None, "faults": 0})  # sent before the fault
    assert not seen.healthy
    assert seen.update_from({"healthy": True, "error": None, "since": None, "faults": 1})
    assert seen.healthy and seen.ready and seen.failures == 0
    for bad in (
        {"healthy": "no", "faults": 1},
        {"healthy": False, "faults": -1},
        {"healthy": True, "faults": 1, "since": float("nan")},
        [],
    ):
        with pytest.raises(ValueError):
            check_health_report(bad)


@pytest.mark.timeout(180)
def test_a_full_store_backs_off_shows_unhealthy_and_recovers(coordinator_factory, cli, broken_data_dir):
    """A collector whose chunk writes fail used to fail task after task in a hot loop, with nothing saying why."""
    backoff, cap = 0.25, 1.0
    coordinator, server = coordinator_factory(
        token=TOKEN, worker=dict(storage_backoff=backoff, storage_max_backoff=cap)
    )

    def get(path):
        answer = requests.get(server.url + "/api/v1" + path, timeout=5)
        assert answer.status_code == 200, answer.text
        return answer.json()

    cli("collector", "collector", "--coordinator", server.url, env=TOKEN_ENV)
    eventually(lambda: get("/cluster")["env_steps"] > 0, timeout=60, message="the collector collecting")
    assert get("/cluster")["storage"] == {"healthy": True, "error": None, "since": None, "workers": []}

    broken_data_dir.break_it()
    storage = eventually(
        lambda: (lambda s: s if not s["healthy"] else None)(get("/cluster")["storage"]),
        timeout=30,
        message="the store shown unhealthy",
    )
    assert storage["workers"] == ["collector-1"] and broken_data_dir.errno in storage["error"], storage
    assert get("/collectors/collector-1")["storage"]["healthy"] is False
    browser = chrome()
    try:
        browser.set_page_load_timeout(30)
        browser.get(server.url + "/")
        banner = eventually(
            lambda: (lambda b: b if b.is_displayed() else None)(browser.find_element("id", "storage-banner")),
            timeout=20,
            message="the dashboard's storage banner",
        )
        assert "Shared store unhealthy" in banner.text and broken_data_dir.errno in banner.text, banner.text
        check_backoff_and_recovery(get, broken_data_dir, backoff, cap)
        eventually(
            lambda: not browser.find_element("id", "storage-banner").is_displayed(),
            timeout=20,
            message="the banner gone once the store works",
        )
    finally:
        browser.quit()


def check_backoff_and_recovery(get, broken_data_dir, backoff, cap):
    """The store failing: no hot loop, the failures spaced by the backoff; repaired: healthy and collecting."""
    # no hot loop: consecutive storage failures are spaced by the doubling backoff (counted from REST)
    failed = eventually(
        lambda: (lambda t: t if len(t) >= 5 else None)(get("/tasks?kind=collector&state=failed")["tasks"]),
        timeout=60,
        message="five failed collector tasks",
    )
    failed.sort(key=lambda t: t["started_at"])
    assert all("StorageFaultError" in t["error"] and broken_data_dir.errno in t["error"] for t in failed), failed
    gaps = [later["started_at"] - earlier["finished_at"] for earlier, later in zip(failed, failed[1:])]
    wanted = [min(cap, backoff * 2**i) for i in range(len(gaps))]
    assert all(gap >= want - 0.02 for gap, want in zip(gaps, wanted)), (gaps, wanted)
    span = failed[-1]["finished_at"] - failed[0]["finished_at"]
    assert (len(failed) - 1) / span <= 1 / backoff, (len(failed), span)  # failures per second, bounded

    steps = get("/cluster")["env_steps"]
    broken_data_dir.repair()
    eventually(
        lambda: get("/cluster")["storage"]["healthy"] and get("/cluster")["env_steps"] > steps,
        timeout=30,
        message="the store healthy again and collection going on",
    )
    assert get("/collectors/collector-1")["storage"]["healthy"] is True
