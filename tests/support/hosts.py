"""Hosts for tests: each one a Linux network namespace with an address of its own on a private bridge.

``Network(tmp_path)`` makes a bridge (``br0``) in a namespace of its own and picks a private /24 for this
instance (from the pid and a counter, so parallel pytest workers never share one); ``network.host("a")`` adds a
namespace with ``lo`` up and an ``eth0`` (a veth whose other end is a port of the bridge) at the next address.
Nothing lives in the root namespace: the test process cannot reach the hosts (it has no route to them), so a
test that needs an answer asks from another host (``host.get_json(url)``), as a user on another machine would.

``host.popen(argv)`` runs ``ip netns exec NS unshare --pid --fork --mount-proc --kill-child argv``: each process
is PID 1 of a PID namespace of its own (no role sees another's processes, and two hosts reuse the same pids)
and has a TMPDIR (and CPU-claims directory) of its own under ``tmp_path/hosts/<name>``. ``host.cli(name,
*args)`` runs ``python -m parallel_rl *args`` that way (a :class:`~tests.support.CliProcess`).
``host.run(["iptables", ...])`` runs a command in the host's namespace and waits for it (iptables works inside a
namespace here with Debian's default nf_tables backend, and with iptables-legacy; use one of them in a test: each
lists only its own rules). ``network.name("coordinator",
host)`` makes a name resolve to a host's address on every host (a Kubernetes Service name): ``ip netns exec``
bind-mounts ``/etc/netns/NS/hosts`` over ``/etc/hosts`` for the processes it starts.

``close()`` (the ``network`` fixture calls it, also when the test failed) stops every process (SIGTERM, then
SIGKILL after a deadline), kills whatever is left in the namespaces (``ip netns pids``; only processes this
harness started live there) and deletes the namespaces, which deletes their links. Without root, or when
``ip netns add`` fails, the test is skipped with the reason.
"""

from __future__ import annotations

import itertools
import json
import logging
import os
import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path
from typing import Dict, List, Optional, Sequence

import pytest

from . import CliProcess, eventually

logger = logging.getLogger(__name__)

COMMAND_SECONDS = 30.0  # an `ip` or `iptables` call
STOP_SECONDS = 10.0  # a process's SIGTERM before its SIGKILL
_instances = itertools.count()


class HostError(RuntimeError):
    """A command of the harness failed."""


STALE_RE = re.compile(r"^prl([0-9a-f]+)x[0-9a-f]+-")  # a harness's namespace: prl<pid>x<instance>-<host or br>


def remove_stale_namespaces() -> None:
    """Delete the namespaces (and kill what runs in them) of harnesses whose test process is gone (it was
    killed before its ``close``)."""
    for line in _ip("netns", "list").splitlines():
        name = line.split()[0] if line.split() else ""
        match = STALE_RE.match(name)
        if not match:
            continue
        try:
            os.kill(int(match.group(1), 16), 0)
            continue  # its test process lives: its namespaces are its own
        except ProcessLookupError:
            pass
        except PermissionError:
            continue
        try:
            Network._empty(name)
            _ip("netns", "del", name)
            shutil.rmtree(Path("/etc/netns") / name, ignore_errors=True)
            logger.warning("hosts: removed %s, left by a test process that is gone", name)
        except (HostError, AssertionError) as exc:
            logger.warning("hosts: could not remove the stale namespace %s: %s", name, exc)


def _ip(*args: str) -> str:
    proc = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=COMMAND_SECONDS)
    if proc.returncode != 0:
        raise HostError(f"ip {' '.join(args)}: {proc.stderr.strip() or proc.returncode}")
    return proc.stdout


def missing() -> Optional[str]:
    """Why hosts cannot be made on this machine (None when they can)."""
    if os.geteuid() != 0:
        return "network namespaces need root (ip netns add): run the tests as root"
    for tool, package in (("ip", "iproute2"), ("unshare", "util-linux")):
        if shutil.which(tool) is None:
            return f"no `{tool}` command: apt-get install {package}"
    return None


class HostProcess(CliProcess):
    """A process on a host: ``proc`` is ``unshare``, whose child (PID 1 of its PID namespace) is the program.
    Signals go to the program (``unshare`` does not pass them on); killing ``unshare`` kills it (--kill-child)."""

    def program_pid(self) -> Optional[int]:
        """The program's pid as the root namespace sees it (None once ``unshare`` has exited)."""

        def child():
            if self.proc.poll() is not None:
                return -1
            try:
                with open(f"/proc/{self.proc.pid}/task/{self.proc.pid}/children") as f:
                    pids = f.read().split()
            except OSError:
                return -1
            return int(pids[0]) if pids else None

        pid = eventually(child, timeout=STOP_SECONDS, message=f"{self.name}: its program started")
        return None if pid == -1 else pid

    @property
    def pid(self) -> int:
        return self.program_pid() or self.proc.pid

    def send_signal(self, signum: int) -> None:
        pid = self.program_pid()
        if pid is None:
            return
        try:
            os.kill(pid, signum)
        except ProcessLookupError:
            pass  # it ended meanwhile: unshare follows

    def stop(self):
        if self.proc.poll() is None:
            self.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(STOP_SECONDS)
            except subprocess.TimeoutExpired:
                self.proc.kill()  # --kill-child: the program (and its namespace) dies with it
                self.proc.wait(STOP_SECONDS)
        self._log.close()


class Host:
    """One network namespace: ``address`` on the network's bridge, ``lo`` up, a TMPDIR of its own."""

    def __init__(self, network: "Network", name: str, netns: str, address: str, root: Path):
        self.network, self.name, self.netns, self.address, self.root = network, name, netns, address, root
        self.tmpdir = root / "tmp"
        self.tmpdir.mkdir(parents=True)
        self.processes: List[HostProcess] = []

    def __repr__(self) -> str:
        return f"Host({self.name!r}, {self.address})"

    def url(self, port: int) -> str:
        return f"http://{self.address}:{port}"

    @property
    def exec_prefix(self) -> tuple:
        return ("ip", "netns", "exec", self.netns)

    def environment(self, env: Optional[Dict[str, str]] = None) -> Dict[str, str]:
        """The environment of a process on this host: the test's, with this host's own temp directories."""
        return {
            **os.environ,
            "TMPDIR": str(self.tmpdir),
            "PARALLEL_RL_CPU_CLAIMS": str(self.root / "cpu-claims"),
            **(env or {}),
        }

    def run(
        self,
        argv: Sequence[str],
        timeout: float = COMMAND_SECONDS,
        check: bool = True,
        env: Optional[Dict[str, str]] = None,
    ) -> subprocess.CompletedProcess:
        """Run ``argv`` in this host's network namespace and wait for it (``check``: a failure raises, with its
        output), e.g. ``host.run(["iptables", "-A", "INPUT", "-s", other.address, "-j", "DROP"])``."""
        proc = subprocess.run(
            [*self.exec_prefix, *argv],
            capture_output=True,
            text=True,
            timeout=timeout,
            env=self.environment(env),
            stdin=subprocess.DEVNULL,
        )
        if check and proc.returncode != 0:
            raise HostError(
                f"{self.name}: {' '.join(argv)} exited with {proc.returncode}: "
                f"{(proc.stderr or proc.stdout).strip()[-2000:]}"
            )
        return proc

    def popen(
        self,
        argv: Sequence[str],
        env: Optional[Dict[str, str]] = None,
        name: Optional[str] = None,
        cwd: Optional[Path] = None,
    ) -> HostProcess:
        """Start ``argv`` on this host as PID 1 of a PID namespace of its own; output to ``<name>.log``."""
        name = name or f"{self.name}-{Path(argv[0]).name}-{len(self.processes)}"
        process = HostProcess(
            self.network.tmp_path,
            name,
            *argv[1:],
            program=(argv[0],),
            env=self.environment(env),
            cwd=cwd,
            prefix=(*self.exec_prefix, "unshare", "--pid", "--fork", "--mount-proc", "--kill-child"),
        )
        self.processes.append(process)
        return process

    def cli(
        self, name: str, *args: str, env: Optional[Dict[str, str]] = None, cwd: Optional[Path] = None
    ) -> HostProcess:
        """``python -m parallel_rl *args`` on this host (see :meth:`popen`)."""
        return self.popen([sys.executable, "-m", "parallel_rl", *args], env=env, name=name, cwd=cwd)

    def get_json(self, url: str, timeout: float = 10.0):
        """GET ``url`` from this host; its JSON body (``AssertionError`` naming the answer when it is none)."""
        script = (
            "import sys, urllib.request\n"
            "with urllib.request.urlopen(sys.argv[1], timeout=float(sys.argv[2])) as r: "
            "sys.stdout.write(r.read().decode())"
        )
        proc = self.run(
            [sys.executable, "-c", script, url, str(timeout)], timeout=timeout + COMMAND_SECONDS, check=False
        )
        assert proc.returncode == 0, f"GET {url} from {self.name}: {proc.stderr.strip()[-1000:]}"
        return json.loads(proc.stdout)


class Network:
    """A bridge in a namespace of its own and the hosts on it (``host(name)``); ``close()`` removes them all."""

    def __init__(self, tmp_path: Path):
        reason = missing()
        if reason:
            pytest.skip(reason)
        self.tmp_path = Path(tmp_path)
        n = next(_instances)
        tag = f"{os.getpid():x}x{n % 256:x}"  # names stay <= 15 characters
        index = (os.getpid() * 256 + n) % (254 * 256)
        self.prefix = f"10.{1 + index // 256}.{index % 256}"  # this instance's /24
        self.bridge_netns = f"prl{tag}-br"
        self.host_prefix = f"prl{tag}-"
        self.hosts: List[Host] = []
        self.namespaces: List[str] = []
        self.names: Dict[str, str] = {}  # name -> address, in every host's /etc/hosts
        remove_stale_namespaces()
        try:
            self._add_netns(self.bridge_netns)
            _ip("-n", self.bridge_netns, "link", "add", "br0", "type", "bridge")
            _ip("-n", self.bridge_netns, "link", "set", "br0", "up")
        except HostError as exc:
            self.close()
            pytest.skip(f"network namespaces do not work here: {exc}")

    def _add_netns(self, name: str) -> None:
        _ip("netns", "add", name)
        self.namespaces.append(name)
        _ip("-n", name, "link", "set", "lo", "up")

    def host(self, name: str) -> Host:
        """A new host ``name`` (a label for logs) at the next address of this network."""
        i = len(self.hosts)
        if i >= 200:
            raise HostError("a Network holds at most 200 hosts")
        netns, port = f"{self.host_prefix}{i}", f"p{i}"
        self._add_netns(netns)
        _ip("-n", self.bridge_netns, "link", "add", port, "type", "veth", "peer", "name", "eth0", "netns", netns)
        _ip("-n", self.bridge_netns, "link", "set", port, "master", "br0", "up")
        address = f"{self.prefix}.{i + 2}"
        _ip("-n", netns, "addr", "add", f"{address}/24", "dev", "eth0")
        _ip("-n", netns, "link", "set", "eth0", "up")
        host = Host(self, name, netns, address, self.tmp_path / "hosts" / name)
        self.hosts.append(host)
        if self.names:
            self._write_hosts_file(host)
        return host

    def name(self, alias: str, host: Host) -> None:
        """Make ``alias`` resolve to ``host``'s address on every host of this network, for the processes started
        from now on (as a Kubernetes Service name resolves in every pod)."""
        self.names[alias] = host.address
        for each in self.hosts:
            self._write_hosts_file(each)

    def _write_hosts_file(self, host: Host) -> None:
        path = Path("/etc/netns") / host.netns / "hosts"
        path.parent.mkdir(parents=True, exist_ok=True)
        lines = ["127.0.0.1 localhost", f"{host.address} {host.netns}"]
        path.write_text("\n".join(lines + [f"{address} {alias}" for alias, address in self.names.items()]) + "\n")

    def close(self) -> None:
        """Stop every process, then delete every namespace (their links go with them). Raises HostError after
        trying everything when something could not be removed."""
        for host in self.hosts:
            for process in reversed(host.processes):
                try:
                    process.stop()
                except (OSError, subprocess.SubprocessError, AssertionError) as exc:
                    logger.warning("hosts: stopping %s failed: %s", process.name, exc)
        left = []
        for netns in reversed(self.namespaces):
            try:
                self._empty(netns)
                _ip("netns", "del", netns)
                shutil.rmtree(Path("/etc/netns") / netns, ignore_errors=True)  # a hosts file of name()
            except (HostError, AssertionError, subprocess.SubprocessError) as exc:
                left.append(f"{netns} ({exc})")
        self.namespaces = []
        if left:
            raise HostError(f"hosts: could not remove {', '.join(left)}")

    @staticmethod
    def _empty(netns: str) -> None:
        """SIGKILL what still runs in ``netns`` (only processes this harness started) and wait until it is gone."""

        def pids():
            return [int(p) for p in _ip("netns", "pids", netns).split()]

        for pid in pids():
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        eventually(lambda: not pids(), timeout=STOP_SECONDS, interval=0.05, message=f"{netns} emptied")

    def __enter__(self) -> "Network":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


# ---- partitions (tests/test_faults.py, benchmarks/hosts.py --partition) --------------------------------------------
def cut(host: Host, peer: Host, *, answers_only_from_port: Optional[int] = None) -> List[List[str]]:
    """Partition ``host`` from ``peer`` with iptables DROP rules inside ``host``: every packet between them (both
    directions), or with ``answers_only_from_port``, only the packets carrying data that ``host`` sends from that
    port to ``peer`` (its server's answers: requests arrive, TCP's handshake and ACKs pass, every answer is
    dropped). Returns the rules, for :func:`heal`."""
    if answers_only_from_port is None:
        rules = [["INPUT", "-s", peer.address, "-j", "DROP"], ["OUTPUT", "-d", peer.address, "-j", "DROP"]]
    else:
        rules = [
            [
                "OUTPUT",
                "-d",
                peer.address,
                "-p",
                "tcp",
                "--sport",
                str(answers_only_from_port),
                "-m",
                "length",
                "--length",
                "100:65535",
                "-j",
                "DROP",
            ]
        ]
    for rule in rules:
        host.run(["iptables", "-A", *rule])
    return rules


def heal(host: Host, rules: List[List[str]]) -> None:
    """Delete the rules :func:`cut` added to ``host``."""
    for rule in rules:
        host.run(["iptables", "-D", *rule])


# ---- a cluster on hosts (tests/test_hosts.py, tests/test_faults.py) ------------------------------------------------
TOKEN = "hosts-test-token"
ENV = {"PARALLEL_RL_TOKEN": TOKEN}


def start_coordinator(
    host: Host, config: str, shared, tmp_path: Path, *extra: str, env: Optional[Dict[str, str]] = None
):
    """`parallel-rl coordinator` bound to ``host``'s address, port picked by the OS; (its process, its REST URL)."""
    coordinator = host.cli(
        "coordinator",
        "coordinator",
        "-c",
        config,
        "--host",
        host.address,
        "--port",
        "0",
        "--shared-dir",
        str(shared),
        "--set",
        f"exp_name={Path(tmp_path) / 'exp'}",
        *extra,
        env={**ENV, **(env or {})},
    )
    url = coordinator.wait_line(rf"^REST API: (http://{re.escape(host.address)}:\d+)/api/v1$", timeout=120).group(1)
    return coordinator, url


def start_worker(
    host: Host,
    role: str,
    url: str,
    shared,
    *extra: str,
    name: Optional[str] = None,
    env: Optional[Dict[str, str]] = None,
) -> HostProcess:
    """A ``role`` (learner, collector) on ``host`` that registers itself with the coordinator at ``url`` and
    advertises ``host``'s address, port 9000 (as in deploy/k8s)."""
    return host.cli(
        name or f"{role}-{host.name}",
        role,
        "--coordinator",
        url,
        "--host",
        host.address,
        "--port",
        "9000",
        "--advertise",
        host.url(9000),
        "--shared-dir",
        str(shared),
        *extra,
        env={**ENV, **(env or {})},
    )


def start_roles(
    network: Network,
    config: str,
    tmp_path: Path,
    *extra: str,
    env: Optional[Dict[str, str]] = None,
    shared: Optional[str] = None,
):
    """Coordinator on host A (bound to A's address, --linger: its REST API stays up after training), learner on B,
    collectors on C and D that register themselves and advertise their own addresses (port 9000, as in
    deploy/k8s); the data directory (``tmp_path/shared``) is the only thing they share, and host E is left for a
    user's REST calls. ``extra``: more coordinator arguments; ``env``: more environment for every role (an object
    store's credentials); ``shared``: the store (an object store's URL) instead of the directory. Returns the hosts
    (a, b, c, d, e), the coordinator, its URL."""
    a, b, c, d, e = (network.host(name) for name in "abcde")
    shared = shared or Path(tmp_path) / "shared"
    coordinator, url = start_coordinator(a, config, shared, tmp_path, "--linger", *extra, env=env)
    start_worker(b, "learner", url, shared, name="learner", env=env)
    for host in (c, d):
        start_worker(host, "collector", url, shared, name=f"collector-{host.name}", env=env)
    return (a, b, c, d, e), coordinator, url


def start_seaweedfs_on(host: Host, dir: Path, bucket: str, timeout: float = 120.0):
    """SeaweedFS's S3 gateway (tests/support/seaweedfs.py's server, its default ports) running on ``host``, with
    ``bucket`` made; returns the server (its ``env()`` points our processes at it). The test process cannot reach
    a host, so readiness is a signed request made from ``host`` itself. Skips when the ``weed`` binary is missing."""
    from . import seaweedfs

    reason = seaweedfs.missing_reason()
    if reason:
        pytest.skip(reason)
    dir = Path(dir)
    (dir / "data").mkdir(parents=True, exist_ok=True)
    identities = dir / "s3-identities.json"
    identities.write_text(
        json.dumps(
            {
                "identities": [
                    {
                        "name": "tests",
                        "credentials": [{"accessKey": seaweedfs.ACCESS_KEY, "secretKey": seaweedfs.SECRET_KEY}],
                        "actions": ["Admin", "Read", "Write", "List", "Tagging"],
                    }
                ]
            }
        )
    )
    # ports of their own on a host of its own, yet not SeaweedFS's defaults: weed names Unix sockets in the shared
    # /tmp after them (seaweedfs.SeaweedFS.stop removes them), which another test's server would share
    base = 20000 + int(host.address.rsplit(".", 2)[1]) * 160 + int(host.address.rsplit(".", 1)[1]) % 16 * 10
    ports = {name: base + i for i, name in enumerate(seaweedfs.DEFAULT_PORTS)}
    process = host.popen(
        seaweedfs._command(seaweedfs.weed_binary(), host.address, dir, ports, identities), name="seaweedfs", cwd=dir
    )
    server = seaweedfs.SeaweedFS(
        f"http://{host.address}:{ports['s3']}",
        seaweedfs.ACCESS_KEY,
        seaweedfs.SECRET_KEY,
        host.address,
        dir,
        ports,
        process.proc,
        process.log_path,
    )
    script = (
        "import sys, boto3, botocore.config, botocore.exceptions\n"
        "c = boto3.client('s3', config=botocore.config.Config(connect_timeout=2, read_timeout=5, "
        "retries={'max_attempts': 1}))\n"
        "try:\n    c.create_bucket(Bucket=sys.argv[1])\n"
        "except c.exceptions.BucketAlreadyOwnedByYou:\n    pass\n"
    )

    def made():
        if process.proc.poll() is not None:
            raise AssertionError(f"SeaweedFS on {host.name} exited:\n{process.output()[-3000:]}")
        return host.run([sys.executable, "-c", script, bucket], check=False, env=server.env()).returncode == 0

    eventually(made, timeout=timeout, interval=0.5, message=f"SeaweedFS on {host.name} made bucket {bucket}")
    return server
