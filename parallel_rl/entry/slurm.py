"""``parallel-rl slurm``: one training as a Slurm batch job, rendered and submitted with ``sbatch``.

The job's batch script (written into the run's directory, mode 0600) runs the coordinator on the job's first node
(a control plane: no torch, no CPU of its own) and two job steps: ``srun`` of one learner (``--gres`` when asked)
and ``srun`` of N collector tasks, exactly the roles docker-compose starts. The collectors and the learner bind
all interfaces and advertise their host's address; the coordinator listens on ``--port`` (default: a port
derived from the job id) and its URL is written to ``<run>/slurm/coordinator.url``.

The cluster token lives in the run's token file (0600, beside the client commands' ``--token-file``): the
script reads it when it runs. It is never on a command line, in the script, or in the environment ``sbatch``
hands to slurmctld (``scontrol show job``, ``squeue``, the job's stored environment).

``scancel`` sends SIGTERM to every step and to the batch script: the roles stop as on ``docker compose stop``
(collectors deregister, the coordinator saves its state). The job is ``--requeue``-able: a requeued or
preempted job runs the same script again (``SLURM_RESTART_COUNT`` > 0) and the coordinator continues from the
state it saved (``coordinator --resume``). ``--join`` submits a second job of collectors that join the training
running in the same directory.
"""

from __future__ import annotations

import logging
import os
import re
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from typing import List, Optional, Sequence, Tuple

from ..errors import ConfigError, ParallelRLError

logger = logging.getLogger(__name__)

# the run directory's Slurm files: scripts, the jobs' output, the coordinator's URL
SLURM_DIR = "slurm"
URL_FILE = "coordinator.url"
# a coordinator port from the job id when none is given: two trainings on one node rarely collide, and it stays
# below the kernel's ephemeral range (32768-60999): a requeued coordinator gets its port back (docs/deploy.md)
PORT_BASE, PORT_SPAN = 20000, 12000
# after the coordinator has ended, how long the script waits for the workers it told to stop
WORKER_GRACE_SECONDS = 60
_SBATCH_OPTION = re.compile(r"--[A-Za-z][A-Za-z0-9-]*(=[^\n\r]*)?")
_GRES = re.compile(r"[A-Za-z0-9_:.,-]+")
_PARTITION = re.compile(r"[A-Za-z0-9_.,-]+")


class SlurmError(ParallelRLError):
    """sbatch is missing or refused the job (exit 1)."""


@dataclass(frozen=True)
class SlurmJob:
    """What one ``parallel-rl slurm`` submission runs; checked at construction."""

    config: str  # absolute path of the config file
    run_dir: str  # where the script, the token file and the jobs' output live (the shared dir when it is local)
    shared_dir: str  # the shared store's root as the roles get it (a path or s3://...)
    token_file: str
    collectors: int = 2
    overrides: Tuple[str, ...] = ()
    partition: Optional[str] = None
    gres: Optional[str] = None
    port: Optional[int] = None
    resume: bool = False
    join: bool = False  # a job of collectors for the training already running in run_dir
    sbatch_options: Tuple[str, ...] = ()
    job_name: str = "parallel-rl"
    python: str = field(default_factory=lambda: sys.executable)

    def __post_init__(self):
        if self.collectors < 1:
            raise ConfigError(f"--collectors must be >= 1, got collectors={self.collectors}")
        if self.port is not None and not 1 <= self.port <= 65535:
            raise ConfigError(
                f"--port {self.port}: a Slurm job's coordinator needs a fixed port 1-65535 (the "
                f"workers are told it before it starts); leave it out for one from the job id"
            )
        if self.gres is not None and not _GRES.fullmatch(self.gres):
            raise ConfigError(f"--gres {self.gres!r} is not a Slurm GRES: use e.g. gpu:1 or gpu:a100:2")
        if self.partition is not None and not _PARTITION.fullmatch(self.partition):
            raise ConfigError(
                f"--partition {self.partition!r} is not a partition name: letters, digits, '_', '-', '.' and ',' only"
            )
        for option in self.sbatch_options:
            if not _SBATCH_OPTION.fullmatch(option):
                raise ConfigError(
                    f"--sbatch {option!r} is not one long sbatch option: write it as "
                    f"--sbatch=--time=02:00:00 (one line, starting with --)"
                )
        if re.search(r"[\s%]", self.run_dir):  # an #SBATCH line ends at white space; % is a file name pattern there
            raise ConfigError(
                f"the run directory {self.run_dir!r} has white space or '%': sbatch's --output cannot "
                f"name a file in it; pass another --shared-dir (or exp_name, for an s3:// store)"
            )
        if not re.fullmatch(r"[A-Za-z0-9_.-]+", self.job_name):
            raise ConfigError(f"job name {self.job_name!r}: letters, digits, '_', '-' and '.' only")

    @property
    def slurm_dir(self) -> str:
        return os.path.join(self.run_dir, SLURM_DIR)

    @property
    def script_path(self) -> str:
        return os.path.join(self.slurm_dir, "collectors.sh" if self.join else "job.sh")

    @property
    def url_file(self) -> str:
        return os.path.join(self.slurm_dir, URL_FILE)


def _role(job: SlurmJob, role: str) -> str:
    """The command line of one role (its token comes from the environment the script set)."""
    words = [job.python, "-m", "parallel_rl", role, "-c", job.config]
    for text in job.overrides:
        words += ["--set", text]
    words += ["--shared-dir", job.shared_dir]
    return " ".join(shlex.quote(w) for w in words)


def _header(job: SlurmJob, tasks: int, name: str) -> List[str]:
    q = shlex.quote
    lines = [
        "#!/bin/bash",
        f"#SBATCH --job-name={name}",
        f"#SBATCH --ntasks={tasks}",
        f"#SBATCH --output={job.slurm_dir}/slurm-%j.out",
        "#SBATCH --open-mode=append",
    ]
    if job.partition:
        lines.append(f"#SBATCH --partition={job.partition}")
    if job.gres and not job.join:
        lines.append(f"#SBATCH --gres={job.gres}")
    if not job.join:
        lines.append("#SBATCH --requeue")
    lines += [f"#SBATCH {option}" for option in job.sbatch_options]
    lines += [
        f"# rendered by `parallel-rl slurm`; {'collectors joining the training in' if job.join else 'run'} "
        f"{job.run_dir}",
        "set -u",
        "umask 077",
        f"TOKEN_FILE={q(job.token_file)}",
        "# the cluster token: read here, never on a command line or in sbatch's environment",
        'PARALLEL_RL_TOKEN=$(cat -- "$TOKEN_FILE") || { echo "parallel-rl slurm: cannot read the token file '
        '$TOKEN_FILE" >&2; exit 1; }',
        "export PARALLEL_RL_TOKEN",
    ]
    return lines


def render_script(job: SlurmJob) -> str:
    """The batch script of ``job``: the training's (coordinator, learner, collectors) or, with ``join``, a job of
    collectors for the training already running."""
    q = shlex.quote
    collector = _role(job, "collector") + ' --coordinator "$URL" --host 0.0.0.0 --port 0'
    if job.join:
        lines = _header(job, job.collectors, f"{job.job_name}-collectors")
        lines += [
            f"URL_FILE={q(job.url_file)}",
            'URL=$(cat -- "$URL_FILE") || { echo "parallel-rl slurm: no training runs there: no $URL_FILE" >&2; '
            "exit 1; }",
            'echo "collectors joining $URL"',
            f"exec srun --ntasks={job.collectors} {collector}",
            "",
        ]
        return "\n".join(lines)
    lines = _header(job, job.collectors + 1, job.job_name)
    port = str(job.port) if job.port else f"$(( {PORT_BASE} + SLURM_JOB_ID % {PORT_SPAN} ))"
    start = "--resume" if job.resume else '$( [ "${SLURM_RESTART_COUNT:-0}" -gt 0 ] && echo --resume || echo --fresh )'
    gres = f" --gres={job.gres}" if job.gres else ""
    no_gres = " --gres=none" if job.gres else ""
    lines += [
        f"PORT={port}",
        'URL="http://$(hostname):$PORT"',
        f"URL_FILE={q(job.url_file)}",
        'echo "$URL" > "$URL_FILE.tmp" && mv -f -- "$URL_FILE.tmp" "$URL_FILE"',
        # a requeued (preempted) job continues from the saved state; the first start is a fresh run
        f"START={start}",
        'echo "REST API: $URL/api/v1 (job $SLURM_JOB_ID, start ${SLURM_RESTART_COUNT:-0}: $START)"',
        # the coordinator runs in the batch step itself (no CPU of its own); scancel's SIGTERM reaches it there
        f'{_role(job, "coordinator")} --host 0.0.0.0 --port "$PORT" --advertise "$URL" $START &',
        "coordinator=$!",
        f'srun --ntasks=1 --nodes=1 --exact{gres} {_role(job, "learner")} --coordinator "$URL" '
        f"--host 0.0.0.0 --port 0 &",
        "learner=$!",
        f"srun --ntasks={job.collectors} --exact{no_gres} {collector} &",
        "collectors=$!",
        # scancel signals every process of the job; this forwards a signal sent to the script alone
        'trap \'kill -TERM "$coordinator" "$learner" "$collectors" 2>/dev/null\' TERM INT',
        'while wait "$coordinator"; code=$?; kill -0 "$coordinator" 2>/dev/null; do :; done',
        f"# the coordinator told the workers to stop: they have {WORKER_GRACE_SECONDS} s",
        f'( sleep {WORKER_GRACE_SECONDS}; kill -TERM "$learner" "$collectors" 2>/dev/null ) &',
        "grace=$!",
        'wait "$learner" "$collectors"',
        'kill "$grace" 2>/dev/null',
        'echo "coordinator exited with $code"',
        'exit "$code"',
        "",
    ]
    return "\n".join(lines)


def write_private(path: str, text: str) -> None:
    """``text`` into ``path``, readable by this user only from its creation (0600), moved into place whole."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    temp = f"{path}.tmp-{os.getpid()}"
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.chmod(temp, 0o600)  # O_CREAT's mode is only used for a new file
        os.replace(temp, path)
    except BaseException:
        if os.path.exists(temp):
            os.unlink(temp)
        raise


def sbatch_environment(environ: Optional[dict] = None) -> dict:
    """The environment sbatch runs with (and copies into the job, where slurmctld keeps it): the caller's,
    without the cluster token."""
    from ..transport import TOKEN_ENV

    return {k: v for k, v in (os.environ if environ is None else environ).items() if k != TOKEN_ENV}


def submit(script_path: str, sbatch: Sequence[str] = ("sbatch",)) -> str:
    """``sbatch --parsable SCRIPT``; the job id, or SlurmError with sbatch's own line."""
    binary = shutil.which(sbatch[0])
    if binary is None:
        raise SlurmError(
            f"sbatch not found on PATH: run `parallel-rl slurm` on a Slurm login node, or pass "
            f"--render-only and submit {script_path} yourself"
        )
    done = subprocess.run(
        [binary, *sbatch[1:], "--parsable", script_path],
        capture_output=True,
        text=True,
        env=sbatch_environment(),
        timeout=120,
    )
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or [f"exit code {done.returncode}"])[-1]
        raise SlurmError(f"sbatch refused {script_path}: {last}")
    job_id = done.stdout.strip().split(";")[0]
    if not job_id.isdigit():
        raise SlurmError(f"sbatch printed {done.stdout.strip()!r}, not a job id")
    return job_id


def job_for(
    cfg,
    config_path: str,
    overrides: Sequence[str] = (),
    collectors: int = 2,
    shared_dir: Optional[str] = None,
    **options,
) -> SlurmJob:
    """The :class:`SlurmJob` of a compiled config: its shared store (``--shared-dir``, else the config's) and its
    run directory: the store's root when it is a local path, else the experiment directory (an object store has
    no place for a script or a token file: the experiment directory must be on the cluster's filesystem)."""
    from ..runtime import experiment_dir, run_storage
    from ..storage import lock_shared_dir
    from .launcher import TOKEN_FILE

    storage = run_storage(cfg, shared_dir)
    if not options.get("join"):  # a training running there now: its token file is not ours to replace
        lock_shared_dir(storage, "parallel-rl slurm").release()
    if options.get("resume") and not storage.states.seqs():  # the job's coordinator would say so, minutes later
        raise ConfigError(
            f"--resume: no saved coordinator state in {storage.state_dir}; pass the --shared-dir of "
            f"the training to continue, or leave --resume out to start a new one"
        )
    run_dir = os.path.abspath(storage.local_dir(fallback=experiment_dir(cfg)))
    return SlurmJob(
        config=os.path.abspath(config_path),
        run_dir=run_dir,
        shared_dir=storage.root if storage.remote else os.path.abspath(storage.root),
        token_file=os.path.join(run_dir, TOKEN_FILE),
        collectors=collectors,
        overrides=tuple(overrides),
        **options,
    )


def ensure_token(job: SlurmJob) -> str:
    """The cluster token the job reads: ``PARALLEL_RL_TOKEN`` when set (written to the token file), else the
    token file's (a joining job, a resumed run), else a new one. Returns how it was chosen."""
    from ..transport import TOKEN_ENV, new_token, token_from_file, write_token_file

    if os.environ.get(TOKEN_ENV):
        write_token_file(job.token_file, os.environ[TOKEN_ENV])
        return f"from {TOKEN_ENV}"
    if os.path.exists(job.token_file) and (job.join or job.resume):
        token_from_file(job.token_file)  # readable and not empty, or a ConfigError naming it
        return "the run's"
    if job.join:
        raise ConfigError(
            f"--join: no token file {job.token_file}: is a training running in {job.run_dir}? "
            f"(pass the --shared-dir of its `parallel-rl slurm`, or export {TOKEN_ENV})"
        )
    write_token_file(job.token_file, new_token())
    return "new"


def submit_job(job: SlurmJob, render_only: bool = False, out=None) -> Optional[str]:
    """Write the token file and the script (0600), then ``sbatch`` it (unless ``render_only``); prints what to
    type next. Returns the job id."""
    out = out or sys.stdout
    which_token = ensure_token(job)
    write_private(job.script_path, render_script(job))
    print(f"script: {job.script_path}", file=out)
    print(f"token: in {job.token_file} ({which_token}; client commands: --token-file {job.token_file})", file=out)
    if render_only:
        print(f"submit with: sbatch {shlex.quote(job.script_path)}", file=out, flush=True)
        return None
    job_id = submit(job.script_path)
    output = os.path.join(job.slurm_dir, f"slurm-{job_id}.out")
    print(f"submitted batch job {job_id}", file=out)
    print(f"watch: squeue -j {job_id}; output: {output}; stop: scancel {job_id}", file=out)
    if not job.join:
        print(
            f"REST API: once it runs, the URL in {job.url_file} + /api/v1 (also the first line of {output})", file=out
        )
    out.flush()
    return job_id
