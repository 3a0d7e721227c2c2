"""A real Slurm on this machine for the tests: Debian's ``munged``, ``mariadbd``, ``slurmdbd``, ``slurmctld`` and
``slurmd`` run from a temporary directory, with their own ``slurm.conf`` (``SLURM_CONF``), spool and state
directories, free ports and a munge key made here; one node with this machine's CPUs; everything stopped at the end.

Accounting (``sacct``): Slurm 22.05 keeps job records only through ``accounting_storage/slurmdbd`` (``filetxt``
is gone), and slurmdbd only speaks MySQL. The lightest real thing is therefore a private MariaDB server on
127.0.0.1 (its own data directory, ``--skip-grant-tables``: no users to create) behind a private slurmdbd.
Processes and cgroups: ``proctrack/linuxproc`` and ``task/none`` (a container's cgroups are not Slurm's to use).
"""

from __future__ import annotations

import getpass
import os
import secrets
import shutil
import socket
import subprocess
from pathlib import Path
from typing import Dict, List, Optional

import pytest

from . import eventually, free_port

DAEMONS = ("munged", "mariadbd", "mariadb-install-db", "slurmdbd", "slurmctld", "slurmd")
CLIENTS = ("sbatch", "squeue", "scontrol", "sacct", "sacctmgr", "scancel", "srun")
SBIN = ("/usr/sbin", "/usr/bin", "/sbin", "/bin")
# a daemon or client that takes longer than this to come up or answer on a loaded 2-core box is broken
START_DEADLINE = 90.0


def which(name: str) -> Optional[str]:
    return shutil.which(name) or next(
        (os.path.join(d, name) for d in SBIN if os.access(os.path.join(d, name), os.X_OK)), None
    )


def missing() -> Optional[str]:
    """Why this machine cannot run the test Slurm (one line), or None when it can."""
    if os.geteuid() != 0:
        return "the test Slurm needs root (slurmd starts jobs as their user); run the tests as root"
    absent = [name for name in DAEMONS + CLIENTS if which(name) is None]
    if absent:
        return (
            f"{', '.join(absent)} not installed: `make slurm` installs Debian's slurmctld, slurmd, slurmdbd, "
            f"slurm-client, munge and mariadb-server"
        )
    return None


class SlurmCluster:
    """The daemons of one test Slurm, started in ``root`` by :meth:`start`, stopped by :meth:`stop`."""

    def __init__(self, root: Path):
        self.root = Path(root)
        self.name = f"prl{secrets.token_hex(3)}"  # the cluster's name in the accounting database
        self.node = f"{self.name}n1"
        self.procs: List[subprocess.Popen] = []
        self.logs: Dict[str, Path] = {}
        self.ports = {role: free_port() for role in ("mysql", "dbd", "ctld", "slurmd")}
        self.conf = self.root / "etc" / "slurm.conf"
        self.munge_socket = self.root / "munge" / "munge.socket"

    # ---- what tests use ---------------------------------------------------------------------
    @property
    def env(self) -> Dict[str, str]:
        """The environment for Slurm's client commands (and for `parallel-rl slurm`, which calls sbatch)."""
        return {**os.environ, "SLURM_CONF": str(self.conf)}

    def run(self, *argv: str, timeout: float = 30.0, check: bool = True) -> str:
        """A client command's output (``check``: a non-zero exit fails with its stderr)."""
        done = subprocess.run(
            [which(argv[0]) or argv[0], *argv[1:]], env=self.env, capture_output=True, text=True, timeout=timeout
        )
        if check and done.returncode != 0:
            raise AssertionError(f"{' '.join(argv)} exited {done.returncode}: {done.stderr.strip()}")
        return done.stdout

    def job_state(self, job_id: str) -> str:
        """The job's state as slurmctld has it now (PENDING, RUNNING, COMPLETED, ...), '' once it forgot it."""
        out = self.run("squeue", "-h", "-j", job_id, "-o", "%T", check=False)
        return out.strip()

    def sacct(self, job_id: str, fields: str = "JobID,State,ExitCode") -> List[List[str]]:
        """``sacct``'s rows for the job (and its steps), each split on '|'."""
        out = self.run("sacct", "-n", "-P", "-j", job_id, "-o", fields)
        return [line.split("|") for line in out.splitlines() if line.strip()]

    def log_tails(self, lines: int = 15) -> str:
        parts = []
        for name, path in self.logs.items():
            text = path.read_text(errors="replace").splitlines()[-lines:] if path.exists() else ["(no log)"]
            parts.append(f"--- {name} ({path}):\n" + "\n".join(text))
        return "\n".join(parts)

    # ---- the daemons ------------------------------------------------------------------------
    def _spawn(self, name: str, argv: List[str]) -> subprocess.Popen:
        log = self.root / "log" / f"{name}.out"
        self.logs[name] = log
        with open(log, "ab") as out:
            proc = subprocess.Popen(
                [which(argv[0]) or argv[0], *argv[1:]],
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=self.env,
                start_new_session=True,
            )
        self.procs.append(proc)
        return proc

    def _wait(self, what: str, predicate, proc: subprocess.Popen) -> None:
        def ready():
            if proc.poll() is not None:
                raise AssertionError(f"{what} exited with {proc.returncode} while starting:\n{self.log_tails()}")
            return predicate()

        try:
            eventually(ready, timeout=START_DEADLINE, interval=0.2, message=what)
        except AssertionError as exc:
            raise AssertionError(f"{exc}\n{self.log_tails()}") from None

    def _answers(self, *argv: str) -> bool:
        try:
            return (
                subprocess.run(
                    [which(argv[0]) or argv[0], *argv[1:]], env=self.env, capture_output=True, timeout=10
                ).returncode
                == 0
            )
        except subprocess.TimeoutExpired:
            return False

    def _port_open(self, port: int) -> bool:
        with socket.socket() as s:
            s.settimeout(1.0)
            return s.connect_ex(("127.0.0.1", port)) == 0

    def start(self) -> "SlurmCluster":
        for sub in ("etc", "munge", "log", "mysql", "ctld", "spool", "run"):
            (self.root / sub).mkdir(parents=True, exist_ok=True)
        os.chmod(self.root / "munge", 0o711)  # munged: its socket's directory is searchable by all
        key = self.root / "munge" / "munge.key"
        key.write_bytes(secrets.token_bytes(1024))
        os.chmod(key, 0o400)
        self._write_configs()

        munged = self._spawn(
            "munged",
            [
                "munged",
                "--foreground",
                "--force",
                f"--socket={self.munge_socket}",
                f"--key-file={key}",
                f"--log-file={self.root / 'log' / 'munged.log'}",
                f"--pid-file={self.root / 'run' / 'munged.pid'}",
                f"--seed-file={self.root / 'munge' / 'munged.seed'}",
            ],
        )
        self._wait("munged", self.munge_socket.exists, munged)

        datadir = self.root / "mysql" / "data"
        done = subprocess.run(
            [
                which("mariadb-install-db"),
                "--no-defaults",
                f"--datadir={datadir}",
                "--user=root",
                "--auth-root-authentication-method=normal",
                "--skip-test-db",
            ],
            capture_output=True,
            text=True,
            timeout=START_DEADLINE,
        )
        if done.returncode != 0:
            raise AssertionError(f"mariadb-install-db exited {done.returncode}: {done.stderr.strip()[-2000:]}")
        mysql = self._spawn(
            "mariadbd",
            [
                "mariadbd",
                "--no-defaults",
                f"--datadir={datadir}",
                "--user=root",
                "--bind-address=127.0.0.1",
                f"--port={self.ports['mysql']}",
                f"--socket={self.root / 'mysql' / 'mysqld.sock'}",
                f"--pid-file={self.root / 'run' / 'mysqld.pid'}",
                "--skip-grant-tables",
                "--skip-log-bin",
                "--innodb-buffer-pool-size=16M",
                "--innodb-log-file-size=8M",
                "--performance-schema=OFF",
            ],
        )
        self._wait("mariadbd", lambda: self._port_open(self.ports["mysql"]), mysql)

        dbd = self._spawn("slurmdbd", ["slurmdbd", "-D"])
        self._wait("slurmdbd", lambda: self._port_open(self.ports["dbd"]), dbd)
        self.run("sacctmgr", "-i", "add", "cluster", self.name)
        self.run("sacctmgr", "-i", "add", "account", "lab", f"cluster={self.name}")
        self.run("sacctmgr", "-i", "add", "user", getpass.getuser(), "account=lab", f"cluster={self.name}")

        ctld = self._spawn("slurmctld", ["slurmctld", "-D", "-i"])
        self._wait("slurmctld", lambda: self._answers("scontrol", "ping"), ctld)
        slurmd = self._spawn("slurmd", ["slurmd", "-D", "-N", self.node])
        self._wait(
            "slurmd (node idle)", lambda: "idle" in self.run("sinfo", "-h", "-N", "-o", "%T", check=False), slurmd
        )
        return self

    def stop(self) -> None:
        """Cancel what is left, then stop the daemons in reverse order (SIGTERM, then SIGKILL after 20 s)."""
        if any(p.poll() is None for p in self.procs) and self._answers("scontrol", "ping"):
            subprocess.run(
                [which("scancel"), "--full", "-u", getpass.getuser()], env=self.env, capture_output=True, timeout=30
            )
        for proc in reversed(self.procs):
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(20)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait(10)

    def _write_configs(self) -> None:
        r = self.root
        cpus = os.cpu_count() or 1
        auth = f"AuthType=auth/munge\nAuthInfo=socket={self.munge_socket}\n"
        self.conf.write_text(
            f"ClusterName={self.name}\n"
            f"SlurmctldHost={socket.gethostname()}(127.0.0.1)\nMailProg=/bin/true\n"
            f"SlurmctldPort={self.ports['ctld']}\nSlurmdPort={self.ports['slurmd']}\n"
            "SlurmUser=root\nSlurmdUser=root\n"
            # cred_expire is also how long a requeued job waits before it runs again (120 s by default)
            f"AuthType=auth/munge\nAuthInfo=socket={self.munge_socket},cred_expire=30\n"
            "CredType=cred/munge\n"
            f"StateSaveLocation={r / 'ctld'}\nSlurmdSpoolDir={r / 'spool'}\n"
            f"SlurmctldPidFile={r / 'run' / 'slurmctld.pid'}\nSlurmdPidFile={r / 'run' / 'slurmd.pid'}\n"
            f"SlurmctldLogFile={r / 'log' / 'slurmctld.log'}\nSlurmdLogFile={r / 'log' / 'slurmd.log'}\n"
            "ProctrackType=proctrack/linuxproc\nTaskPlugin=task/none\nJobAcctGatherType=jobacct_gather/none\n"
            "AccountingStorageType=accounting_storage/slurmdbd\n"
            f"AccountingStorageHost=127.0.0.1\nAccountingStoragePort={self.ports['dbd']}\n"
            # for slurmdbd connections this names munge's socket (AuthInfo is not used for them in 22.05)
            f"AccountingStoragePass={self.munge_socket}\n"
            "JobCompType=jobcomp/none\nMpiDefault=none\nSchedulerType=sched/backfill\n"
            "SelectType=select/cons_tres\nSelectTypeParameters=CR_CPU\nReturnToService=2\n"
            "SlurmctldDebug=info\nSlurmdDebug=info\nKillWait=30\nMinJobAge=600\n"
            f"NodeName={self.node} NodeAddr=127.0.0.1 NodeHostname={socket.gethostname()} CPUs={cpus} "
            "State=UNKNOWN\n"
            # jobs may share CPUs (a second job of collectors joins a training that holds every CPU of the node)
            f"PartitionName=debug Nodes={self.node} Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE:4\n"
        )
        dbd = self.root / "etc" / "slurmdbd.conf"
        dbd.write_text(
            auth + "DbdHost=localhost\nDbdAddr=127.0.0.1\n"
            f"DbdPort={self.ports['dbd']}\nSlurmUser=root\n"
            f"LogFile={r / 'log' / 'slurmdbd.log'}\nPidFile={r / 'run' / 'slurmdbd.pid'}\n"
            "StorageType=accounting_storage/mysql\nStorageHost=127.0.0.1\n"
            f"StoragePort={self.ports['mysql']}\nStorageUser=root\nStorageLoc=slurm_acct_db\n"
        )
        os.chmod(dbd, 0o600)


@pytest.fixture(scope="session")
def slurm_cluster(tmp_path_factory):
    """The test Slurm, started once per test session (a few seconds) and stopped at its end; the tests that use it
    are skipped, saying why, where this machine cannot run it."""
    why = missing()
    if why:
        pytest.skip(why)
    cluster = SlurmCluster(tmp_path_factory.mktemp("slurm"))
    try:
        yield cluster.start()
    finally:
        cluster.stop()


def fixed_port() -> int:
    """A port free on this machine now, below the kernel's ephemeral range: a coordinator that a requeue restarts
    finds it free again (docs/deploy.md: a worker's reconnects cannot take it)."""
    for _ in range(200):
        port = 20000 + secrets.randbelow(12000)
        with socket.socket() as s:
            try:
                s.bind(("0.0.0.0", port))
            except OSError:
                continue
            return port
    raise AssertionError("no free port in 20000-31999")


def wait_for_state(cluster: SlurmCluster, job_id: str, states, timeout: float) -> str:
    """Wait until the job is in one of ``states`` (squeue, then sacct once slurmctld forgot it); returns it."""
    wanted = {states} if isinstance(states, str) else set(states)

    def now():
        state = cluster.job_state(job_id) or next(
            (row[1].split()[0] for row in cluster.sacct(job_id, "JobID,State") if row[0] == job_id), ""
        )
        return state if state in wanted else None

    return eventually(now, timeout=timeout, interval=0.5, message=f"job {job_id} in {sorted(wanted)}")


def poll_until(predicate, timeout: float, message: str):
    """``eventually`` with a coarser step, for things that take seconds (a training)."""
    return eventually(predicate, timeout=timeout, interval=0.5, message=message)


__all__ = ["SlurmCluster", "fixed_port", "missing", "poll_until", "slurm_cluster", "wait_for_state"]
