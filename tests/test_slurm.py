"""`parallel-rl slurm`: the batch script it renders (no daemons), then trainings on a real Slurm (Debian's munged,
slurmdbd over MariaDB, slurmctld and slurmd started by tests/support/slurm.py; skipped with the reason where the
machine cannot run them)."""

from __future__ import annotations

import os
import re
import secrets
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from parallel_rl.entry.slurm import sbatch_environment
from tests.support import get
from tests.support.slurm import (
    SlurmCluster,
    fixed_port,
    poll_until,
    slurm_cluster,  # noqa: F401 (a fixture)
    wait_for_state,
)
from tests.test_cluster import TOY_CONFIG
from tests.support.s3 import bucket, s3_env, s3_server  # noqa: F401 (fixtures: an S3 server, a bucket)

ROOT = Path(__file__).resolve().parent.parent
CARTPOLE = str(ROOT / "configs" / "cartpole_dqn_parallel.py")


def slurm(tmp_path, *args, env=None, check=True):
    """`python -m parallel_rl slurm ...` to its end (it renders, maybe submits, and exits)."""
    done = subprocess.run(
        [sys.executable, "-m", "parallel_rl", "slurm", *args],
        capture_output=True,
        text=True,
        env={**os.environ, **(env or {})},
        cwd=tmp_path,
        timeout=120,
    )
    if check:
        assert done.returncode == 0, done.stdout + done.stderr
    return done


@pytest.fixture
def toy(tmp_path):
    path = tmp_path / "toy.py"
    path.write_text(TOY_CONFIG)
    return str(path)


def mode(path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


# ---- the rendered script (no daemons) ----------------------------------------------------------------------
def test_render_only_writes_a_private_script_that_runs_every_role(tmp_path, toy, monkeypatch):
    monkeypatch.delenv("PARALLEL_RL_TOKEN", raising=False)
    shared = tmp_path / "shared"
    done = slurm(
        tmp_path,
        "-c",
        toy,
        "--shared-dir",
        str(shared),
        "--collectors",
        "2",
        "--partition",
        "gpu",
        "--gres",
        "gpu:1",
        "--sbatch=--time=02:00:00",
        "--sbatch=--account=lab",
        "--port",
        "8123",
        "--set",
        "env.stop_value=4.5",
        "--render-only",
    )
    script, token_file = shared / "slurm" / "job.sh", shared / "run.token"
    assert mode(script) == 0o600 and mode(token_file) == 0o600
    token = token_file.read_text().strip()
    text = script.read_text()
    assert len(token) >= 24 and token not in text and token not in done.stdout + done.stderr
    assert f"token: in {token_file}" in done.stdout and "submit with: sbatch" in done.stdout
    subprocess.run(["bash", "-n", str(script)], check=True, timeout=30)  # the shell accepts it
    directives = re.findall(r"^#SBATCH (\S+)$", text, re.M)
    # the coordinator runs in the batch script: one task for the learner, one per collector
    assert directives == [
        "--job-name=parallel-rl",
        "--ntasks=3",
        f"--output={shared}/slurm/slurm-%j.out",
        "--open-mode=append",
        "--partition=gpu",
        "--gres=gpu:1",
        "--requeue",
        "--time=02:00:00",
        "--account=lab",
    ]
    roles = {m.group(1): m.group(0) for m in re.finditer(r"^.*-m parallel_rl (\w+) .*$", text, re.M)}
    assert sorted(roles) == ["collector", "coordinator", "learner"]
    for role, line in roles.items():
        assert f"-c {toy} --set env.stop_value=4.5 --shared-dir {shared}" in line
        assert "PARALLEL_RL_TOKEN" not in line and "--token" not in line
    assert roles["coordinator"].startswith(sys.executable) and '--port "$PORT"' in roles["coordinator"]
    assert re.search(r"^srun --ntasks=1 --nodes=1 --exact --gres=gpu:1 .* learner ", roles["learner"])
    assert re.search(r"^srun --ntasks=2 --exact --gres=none .* collector ", roles["collector"])
    assert "PORT=8123" in text
    # a requeued job (SLURM_RESTART_COUNT > 0) continues from the saved state; the first start is fresh
    assert 'START=$( [ "${SLURM_RESTART_COUNT:-0}" -gt 0 ] && echo --resume || echo --fresh )' in text
    assert 'PARALLEL_RL_TOKEN=$(cat -- "$TOKEN_FILE")' in text and f"TOKEN_FILE={token_file}" in text


def test_an_exported_token_goes_to_the_token_file_and_never_to_sbatch(tmp_path, toy):
    secret = "exported-token-" + "x" * 20
    shared = tmp_path / "shared"
    fresh = slurm(tmp_path, "-c", toy, "--shared-dir", str(shared), "--render-only", "--resume", check=False)
    assert fresh.returncode == 2 and "--resume: no saved coordinator state in" in fresh.stderr, fresh.stderr
    (shared / "coordinator" / "state_000000001.json").write_text("{}")  # a saved state, as far as --resume asks
    done = slurm(
        tmp_path, "-c", toy, "--shared-dir", str(shared), "--render-only", "--resume", env={"PARALLEL_RL_TOKEN": secret}
    )
    assert (shared / "run.token").read_text().strip() == secret
    assert secret not in (shared / "slurm" / "job.sh").read_text() and secret not in done.stdout
    assert "START=--resume" in (shared / "slurm" / "job.sh").read_text()
    # what sbatch runs with, and copies into the job that slurmctld keeps
    assert "PARALLEL_RL_TOKEN" not in sbatch_environment({"PARALLEL_RL_TOKEN": secret, "PATH": "/bin"})


def test_join_renders_a_job_of_collectors_for_the_running_training(tmp_path, toy, monkeypatch):
    monkeypatch.delenv("PARALLEL_RL_TOKEN", raising=False)
    shared = tmp_path / "shared"
    refused = slurm(tmp_path, "-c", toy, "--shared-dir", str(shared), "--join", "--render-only", check=False)
    assert refused.returncode == 2 and "--join: no token file" in refused.stderr, refused.stderr
    slurm(tmp_path, "-c", toy, "--shared-dir", str(shared), "--render-only")
    token = (shared / "run.token").read_text()
    slurm(tmp_path, "-c", toy, "--shared-dir", str(shared), "--join", "--collectors", "3", "--render-only")
    assert (shared / "run.token").read_text() == token  # the training's token, kept
    script = shared / "slurm" / "collectors.sh"
    text = script.read_text()
    assert mode(script) == 0o600 and "--requeue" not in text and "#SBATCH --ntasks=3" in text
    assert f"URL_FILE={shared}/slurm/coordinator.url" in text and 'URL=$(cat -- "$URL_FILE")' in text
    assert re.search(r'^exec srun --ntasks=3 .* collector .*--coordinator "\$URL"', text, re.M)
    subprocess.run(["bash", "-n", str(script)], check=True, timeout=30)


@pytest.mark.parametrize(
    "option, value, says",
    [
        ("--gres", "gpu:1\n#SBATCH --uid=0", "--gres 'gpu:1\\n#SBATCH --uid=0' is not a Slurm GRES"),
        ("--partition", "a b", "--partition 'a b' is not a partition name"),
        ("--sbatch", "time=1", "--sbatch 'time=1' is not one long sbatch option"),
        ("--sbatch", "--time=1\n#SBATCH --uid=0", "is not one long sbatch option"),
    ],
)
def test_bad_options_are_refused_with_one_line(tmp_path, toy, option, value, says):
    done = slurm(
        tmp_path, "-c", toy, "--shared-dir", str(tmp_path / "shared"), f"{option}={value}", "--render-only", check=False
    )
    assert done.returncode == 2 and done.stderr.count("\n") == 1 and says in done.stderr, done.stderr
    assert not (tmp_path / "shared" / "slurm" / "job.sh").exists()


def test_a_directory_a_training_runs_in_is_refused_before_its_token_file_is_replaced(tmp_path, toy):
    from parallel_rl.storage import SharedStorage, lock_shared_dir

    shared = tmp_path / "shared"
    slurm(tmp_path, "-c", toy, "--shared-dir", str(shared), "--render-only")
    token = (shared / "run.token").read_text()
    lock = lock_shared_dir(SharedStorage(str(shared)), "parallel-rl coordinator")  # as the job's coordinator holds it
    try:
        done = slurm(tmp_path, "-c", toy, "--shared-dir", str(shared), "--render-only", check=False)
        assert done.returncode == 2 and "is in use by" in done.stderr and done.stderr.count("\n") == 1, done.stderr
        assert (shared / "run.token").read_text() == token
        slurm(tmp_path, "-c", toy, "--shared-dir", str(shared), "--join", "--render-only")  # joining it is the point
    finally:
        lock.release()


def test_on_s3_the_script_and_token_file_go_to_the_experiment_directory(tmp_path, toy, bucket, monkeypatch):
    monkeypatch.delenv("PARALLEL_RL_TOKEN", raising=False)
    exp = tmp_path / "exp"
    slurm(tmp_path, "-c", toy, "--shared-dir", f"s3://{bucket}/run1", "--set", f"exp_name={exp}", "--render-only")
    script = exp / "slurm" / "job.sh"
    assert mode(script) == 0o600 and mode(exp / "run.token") == 0o600
    text = script.read_text()
    assert f"TOKEN_FILE={exp}/run.token" in text and f"#SBATCH --output={exp}/slurm/slurm-%j.out" in text
    assert len(re.findall(rf"--shared-dir s3://{bucket}/run1 ", text)) == 3  # every role, on the bucket


def test_a_run_directory_an_sbatch_line_cannot_name_is_refused(tmp_path, toy):
    done = slurm(tmp_path, "-c", toy, "--shared-dir", str(tmp_path / "two words"), "--render-only", check=False)
    assert done.returncode == 2 and done.stderr.count("\n") == 1 and "has white space or '%'" in done.stderr, (
        done.stderr
    )


def test_without_sbatch_it_says_how_to_submit_by_hand(tmp_path, toy):
    done = slurm(
        tmp_path,
        "-c",
        toy,
        "--shared-dir",
        str(tmp_path / "shared"),
        check=False,
        env={"PATH": str(tmp_path / "empty")},
    )
    assert done.returncode == 1 and done.stderr.count("\n") == 1, done.stderr
    assert "sbatch not found on PATH" in done.stderr and "--render-only" in done.stderr


# ---- on a real Slurm ------------------------------------------------------------------------------------------
def submit(cluster: SlurmCluster, tmp_path, *args, token: str = "") -> str:
    """`parallel-rl slurm ARGS` against the test Slurm, with ``token`` exported (none: it makes one); the job id."""
    env = {k: v for k, v in cluster.env.items() if k != "PARALLEL_RL_TOKEN"}
    if token:
        env["PARALLEL_RL_TOKEN"] = token
    done = subprocess.run(
        [sys.executable, "-m", "parallel_rl", "slurm", *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return re.search(r"^submitted batch job (\d+)$", done.stdout, re.M).group(1)


def job_output(shared: Path, job_id: str) -> str:
    path = shared / "slurm" / f"slurm-{job_id}.out"
    return path.read_text(errors="replace") if path.exists() else ""


def rest_url(shared: Path, job_id: str) -> str:
    """The coordinator's REST API, once the job's coordinator answers (the job writes its URL when it starts)."""
    url_file = shared / "slurm" / "coordinator.url"
    url = (
        poll_until(lambda: url_file.exists() and url_file.read_text().strip(), 120, f"job {job_id} writes {url_file}")
        + "/api/v1"
    )

    def healthy():
        try:
            return get(url, "/health") == {"status": "ok"}
        except OSError:
            return False

    poll_until(healthy, 120, f"the coordinator of job {job_id} answers at {url}")
    return url


def active_collectors(url: str) -> list:
    return [w for w in get(url, "/collectors")["collectors"] if w["state"] in ("idle", "busy")]


def command_lines() -> str:
    """Every process's command line on this machine (what `ps` shows anybody)."""
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                out.append(Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace"))
            except OSError:
                continue
    return "\n".join(out)


def sacct_state(cluster: SlurmCluster, job_id: str) -> tuple:
    """(State, ExitCode) of the job's own sacct row, once slurmdbd has its end."""

    def ended():
        rows = [row for row in cluster.sacct(job_id) if row[0] == job_id]
        state = rows[0][1].split()[0] if rows else "PENDING"  # "CANCELLED by 0": who cancelled it
        return state not in ("PENDING", "RUNNING", "REQUEUED") and (state, rows[0][2])

    return poll_until(ended, 60, f"sacct records the end of job {job_id}")


@pytest.mark.slow
@pytest.mark.timeout(900)  # the daemons' start, a training, Slurm's requeue hold: each wait has its own deadline
def test_a_slurm_job_trains_cartpole_to_its_stop_value_and_sacct_records_it(slurm_cluster, tmp_path):
    shared = tmp_path / "shared"
    token = f"exported-{secrets.token_urlsafe(24)}"  # exported as a lab would: sbatch must not pass it on
    job_id = submit(
        slurm_cluster,
        tmp_path,
        "-c",
        CARTPOLE,
        "--set",
        f"exp_name={tmp_path / 'exp'}",
        "--shared-dir",
        str(shared),
        "--collectors",
        "1",
        "--port",
        str(fixed_port()),
        token=token,
    )
    assert get(rest_url(shared, job_id), "/cluster")["stop_value"] == 195
    assert slurm_cluster.job_state(job_id) == "RUNNING"
    # the token is nowhere anybody else can read it: Slurm's views of the job, its script, the process table,
    # slurmctld's copy of the job (its environment included), any file of the run but the token file
    assert (shared / "run.token").read_text().strip() == token
    views = [
        slurm_cluster.run("scontrol", "show", "job", "-d", job_id),
        slurm_cluster.run("squeue", "-j", job_id, "-o", "%all"),
        slurm_cluster.run("scontrol", "show", "step", job_id, check=False),
        slurm_cluster.run("scontrol", "write", "batch_script", job_id, "-"),
        command_lines(),
    ]
    assert "parallel_rl" in views[3] and job_id in views[0] and "-m parallel_rl coordinator" in views[4]
    assert [view for view in views if token in view] == []
    holders = [
        str(p)
        for d in (shared, slurm_cluster.root / "ctld")
        for p in d.rglob("*")
        if p.is_file() and token.encode() in p.read_bytes()
    ]
    assert holders == [str(shared / "run.token")]
    assert wait_for_state(slurm_cluster, job_id, ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT"), 900) == "COMPLETED", (
        job_output(shared, job_id)[-3000:]
    )
    assert re.search(
        r"^coordinator: solved: eval return \d+\.\d >= stop value 195", job_output(shared, job_id), re.M
    ), job_output(shared, job_id)[-3000:]
    assert sacct_state(slurm_cluster, job_id) == ("COMPLETED", "0:0")


@pytest.mark.slow
@pytest.mark.timeout(900)  # the daemons' start, a training, Slurm's requeue hold: each wait has its own deadline
def test_a_second_job_adds_a_collector_and_scancel_stops_the_training_cleanly(slurm_cluster, tmp_path, toy):
    shared = tmp_path / "shared"
    endless = [
        "-c",
        toy,
        "--set",
        f"exp_name={tmp_path / 'exp'}",
        "--set",
        "env.stop_value=null",
        "--set",
        "parallel.commander.max_seconds=0",
        "--shared-dir",
        str(shared),
        "--collectors",
        "1",
    ]
    job_id = submit(slurm_cluster, tmp_path, *endless, "--port", str(fixed_port()))
    url = rest_url(shared, job_id)
    (first,) = poll_until(lambda: active_collectors(url), 120, "the job's collector registers")
    join_id = submit(slurm_cluster, tmp_path, *endless, "--join")
    both = poll_until(
        lambda: len(active_collectors(url)) == 2 and active_collectors(url),
        120,
        f"job {join_id}'s collector registers beside the first",
    )
    assert first["worker_id"] in [w["worker_id"] for w in both]
    assert get(url, "/cluster")["env_steps"] > 0
    slurm_cluster.run("scancel", job_id)
    # SIGTERM to every step and the script: the coordinator saves its state and exits 0, its workers leave
    assert wait_for_state(slurm_cluster, job_id, ("COMPLETED", "FAILED", "CANCELLED"), 120) == "CANCELLED"
    output = job_output(shared, job_id)
    assert "coordinator: stopped by SIGTERM" in output and "coordinator exited with 0" in output, output[-3000:]
    assert "Traceback" not in output, output[-3000:]
    assert sacct_state(slurm_cluster, job_id)[0] == "CANCELLED"
    # the joining job's collector was let go by the stopping coordinator: it ends cleanly, not cancelled
    assert wait_for_state(slurm_cluster, join_id, ("COMPLETED", "FAILED", "CANCELLED"), 120) == "COMPLETED", job_output(
        shared, join_id
    )[-3000:]
    assert sacct_state(slurm_cluster, join_id) == ("COMPLETED", "0:0")


@pytest.mark.slow
@pytest.mark.timeout(900)  # the daemons' start, a training, Slurm's requeue hold: each wait has its own deadline
def test_a_requeued_training_resumes_from_its_saved_state(slurm_cluster, tmp_path, toy):
    shared = tmp_path / "shared"
    # no stop value: the run ends on its env-step budget, long enough to requeue it half way
    job_id = submit(
        slurm_cluster,
        tmp_path,
        "-c",
        toy,
        "--set",
        f"exp_name={tmp_path / 'exp'}",
        "--set",
        "env.stop_value=null",
        "--set",
        "parallel.commander.max_seconds=0",
        "--set",
        "parallel.commander.max_env_step=6000",
        "--shared-dir",
        str(shared),
        "--collectors",
        "1",
        "--port",
        str(fixed_port()),
    )
    url = rest_url(shared, job_id)
    before = poll_until(
        lambda: (c := get(url, "/cluster"))["env_steps"] >= 1000 and c, 300, "1000 env steps before the requeue"
    )
    slurm_cluster.run("scontrol", "requeue", job_id)
    # scancel's way: SIGTERM to every step; the coordinator saves its state, the job runs again and resumes it
    resumed = poll_until(
        lambda: re.search(
            r"^coordinator: resumed the saved state of \S+: env_steps=(\d+) "
            r"train_iter=(\d+) buffer=(\d+)$",
            job_output(shared, job_id),
            re.M,
        ),
        300,
        f"job {job_id} runs again and resumes",
    )
    assert "start 1: --resume" in job_output(shared, job_id)
    assert int(resumed.group(1)) >= before["env_steps"] and int(resumed.group(2)) >= before["train_iter"]
    assert int(resumed.group(3)) > 0
    assert wait_for_state(slurm_cluster, job_id, ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT"), 600) == "COMPLETED", (
        job_output(shared, job_id)[-3000:]
    )
    output = job_output(shared, job_id)
    assert re.search(r"^coordinator: stopped: .*env", output, re.M), output[-3000:]
    assert sacct_state(slurm_cluster, job_id) == ("COMPLETED", "0:0")
    # sacct keeps both runs of the job: the one requeued and the one that finished
    rows = slurm_cluster.run("sacct", "-n", "-P", "-D", "-X", "-j", job_id, "-o", "JobID,State").splitlines()
    states = [row.split("|")[1] for row in rows]
    assert states[0] == "REQUEUED" and states[-1] == "COMPLETED", states
