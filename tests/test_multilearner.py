"""Data-parallel learners (parallel.learner.world_size): gloo ranks on 127.0.0.1, real processes.

- two ranks, each trained on half of a batch, hold the same parameters as one process trained on the
  whole batch (the optimizer averages the gradients, then clips); through the LearnerAggregator's step
  (each rank reading its half from chunk files) rank 0 gets the whole batch's priorities and learn info;
- under `parallel-rl run` the coordinator sees one learner whose ranks are listed; a killed rank is
  reported, the group restarts from the last learner state and training goes on; 2 ranks solve CartPole.
"""

import multiprocessing
import os
import queue
import re
import signal

import numpy as np
import pytest

from parallel_rl.config import compile_config
from tests.support import eventually, get
from tests.test_cluster import alive, child_pids, start_run, toy_config, worker_pids  # noqa: F401 (fixture)

STEPS = 3


def _batch(step: int, n: int = 64):
    rng = np.random.default_rng(step)
    return {
        "obs": rng.normal(size=(n, 4)).astype(np.float32),
        "next_obs": rng.normal(size=(n, 4)).astype(np.float32),
        "action": rng.integers(0, 2, n),
        "reward": rng.normal(size=n).astype(np.float32),
        "done": (rng.random(n) < 0.1).astype(np.float32),
        "discount": np.full(n, 0.99, np.float32),
        "weight": rng.uniform(0.5, 1.5, n).astype(np.float32),
    }


def _policy():
    from parallel_rl.policy import create_policy

    # max_grad_norm small enough to clip: clipping must act on the averaged gradient
    cfg = compile_config(
        {"policy": {"model": {"hidden_size_list": [32, 32]}, "learn": {"max_grad_norm": 0.5, "target_update_freq": 2}}}
    )
    return create_policy(cfg.policy, 4, 2, seed=7)


def _params(policy):
    return {k: v.detach().numpy().copy() for k, v in policy.model.state_dict().items()}


CHUNKS, CHUNK_ROWS = 4, 32


def _refs(step: int, n: int = 64):
    """A batch of row references into the CHUNKS chunk files, with importance weights."""
    rng = np.random.default_rng(100 + step)
    return {
        "chunk": np.array([f"c{i}" for i in rng.integers(0, CHUNKS, n)]),
        "row": rng.integers(0, CHUNK_ROWS, n),
        "weight": rng.uniform(0.5, 1.5, n).astype(np.float32),
        "index": np.arange(n),
        "uid": np.arange(n),
    }


def _write_chunks(root):
    from parallel_rl.storage import SharedStorage

    storage = SharedStorage(root)
    for i in range(CHUNKS):
        rows = _batch(1000 + i, CHUNK_ROWS)
        del rows["weight"]
        storage.chunks.write(f"c{i}", rows)


def _learner(policy):
    from parallel_rl.learner.learner import create_learner

    cfg = compile_config(
        {"policy": {"learn": {"learner": {"hook": {"log_show_after_iter": 0, "save_ckpt_after_run": False}}}}}
    )
    return create_learner(cfg.policy.learn.learner, policy.learn_mode, instance_name="test learner")


def _rank_main(rank: int, root: str, ports, results):
    """One rank of a group of 2 (one process start serves both checks below):

    1. STEPS updates of a policy on this rank's half of each in-memory batch: its parameters;
    2. a LearnerAggregator's step with a fresh policy: rank 0 sends STEPS batches of references into the
       chunk files under ``root`` (each rank reads its half), then STOP; rank 0's priorities and merged info."""
    import torch

    from parallel_rl.learner.aggregator import GroupStep, Op, share_bounds
    from parallel_rl.policy.distributed import destroy_group, join_group, open_store
    from parallel_rl.storage import SharedStorage

    torch.set_num_threads(1)
    store = open_store(rank, "127.0.0.1", 0 if rank == 0 else ports.get(timeout=30), timeout=30.0)
    if rank == 0:
        ports.put(store.port)
    join_group(store, rank, 2, timeout=30.0)
    try:
        policy = _policy()
        for step in range(STEPS):
            batch = _batch(step)
            start, end = share_bounds(rank, 2, 64)
            policy.forward_learn({k: v[start:end] for k, v in batch.items()})
        results.put(("params", rank, _params(policy)))
        step = GroupStep(_learner(_policy()), SharedStorage(root), rank, 2, CHUNKS, CHUNK_ROWS)
        if rank == 1:
            while step.receive() != Op.STOP:
                pass
            return
        out = [(step.send(Op.TRAIN, _refs(k), merge_info=True), dict(step.merged_info)) for k in range(STEPS)]
        step.send(Op.STOP)
        results.put(("group step", 0, out))
    finally:
        destroy_group()


@pytest.fixture(scope="module")
def two_ranks(tmp_path_factory):
    """What two real gloo ranks on 127.0.0.1 report (see _rank_main), and the chunk files' directory."""
    root = str(tmp_path_factory.mktemp("chunks"))
    _write_chunks(root)
    ctx = multiprocessing.get_context("spawn")
    ports, results = ctx.Queue(), ctx.Queue()
    procs = [ctx.Process(target=_rank_main, args=(rank, root, ports, results)) for rank in (0, 1)]
    for p in procs:
        p.start()
    try:
        got = {(what, rank): value for what, rank, value in (results.get(timeout=120) for _ in range(3))}
    except queue.Empty:
        raise AssertionError(f"the ranks did not finish (exit codes {[p.exitcode for p in procs]})") from None
    finally:
        for p in procs:
            p.join(30)
            if p.is_alive():
                p.kill()
    assert [p.exitcode for p in procs] == [0, 0]
    return got, root


def test_two_gloo_ranks_match_one_process_on_the_whole_batch(two_ranks):
    got, _ = two_ranks
    single = _policy()
    before = _params(single)
    for step in range(STEPS):
        single.forward_learn(_batch(step))
    expected = _params(single)
    for rank in (0, 1):
        for name, value in expected.items():
            np.testing.assert_allclose(
                got["params", rank][name], value, rtol=1e-5, atol=1e-6, err_msg=f"rank {rank} {name}"
            )
    assert any(not np.allclose(before[k], expected[k]) for k in expected), "the updates changed nothing"


def test_group_step_gives_rank_0_the_priorities_and_learn_info_of_the_whole_batch(two_ranks):
    """Two ranks, each reading its half of every batch from chunk files: rank 0 gets every row's priority
    and the ranks' mean learn info, as one learner trained on the whole batch reports them."""
    from parallel_rl.learner.pipeline import RowStore
    from parallel_rl.storage import SharedStorage

    got, root = two_ranks
    single = _policy()
    learner, rows = _learner(single), RowStore(SharedStorage(root), CHUNKS, CHUNK_ROWS)
    for k, (priority, info) in enumerate(got["group step", 0]):
        refs = _refs(k)
        names, local = np.unique(refs["chunk"], return_inverse=True)
        batch, keep = rows.gather(list(names), local, refs["row"])
        assert keep.all()
        batch.update(weight=refs["weight"], index=refs["index"], uid=refs["uid"])
        learner.train(batch)
        expected = np.empty(64, np.float32)
        expected[learner.priority_info["index"]] = learner.priority_info["priority"]
        np.testing.assert_allclose(priority, expected, rtol=1e-4, atol=1e-6, err_msg=f"step {k} priorities")
        # the batch's mean = the mean of the two halves' means (equal halves)
        for name in ("loss", "q_value", "td_error"):
            assert info[name] == pytest.approx(learner.learn_info[name], rel=1e-4, abs=1e-6), (k, name)


def test_world_size_config_is_checked():
    from parallel_rl.errors import ConfigError

    with pytest.raises(ConfigError, match=r"world_size=2 needs an off-policy"):
        compile_config({"policy": {"type": "ppo"}, "parallel": {"learner": {"world_size": 2}}})
    with pytest.raises(ConfigError, match=r"learner.world_size=0"):
        compile_config({"parallel": {"learner": {"world_size": 0}}})


def test_coordinator_sees_one_learner_with_its_ranks(coordinator_factory):
    """A real coordinator and a LearnerAggregator of 2 ranks (rank 1 a real `parallel-rl learner-rank`)."""
    import threading

    from parallel_rl.learner.aggregator import LearnerAggregator

    coordinator, server = coordinator_factory(learner={"world_size": 2, "collective_timeout": 30.0})
    url = server.url + "/api/v1"
    aggregator = LearnerAggregator(server.url, token="test-token", worker_id="learner-1")
    aggregator.start()
    threading.Thread(target=aggregator.run, daemon=True).start()
    try:
        learner = eventually(lambda: running_ranks(url), timeout=60, message="one learner with 2 running ranks")
        workers = get(url, "/workers")["workers"]
        assert [(w["worker_id"], w["kind"]) for w in workers] == [("learner-1", "learner")]
        assert [(w["worker_id"], len(w["ranks"])) for w in get(url, "/learners")["learners"]] == [("learner-1", 2)]
        ranks = sorted(learner["ranks"], key=lambda r: r["rank"])
        assert [r["rank"] for r in ranks] == [0, 1] and ranks[0]["pid"] == os.getpid()
        assert ranks[1]["pid"] != os.getpid() and alive(ranks[1]["pid"])
    finally:
        aggregator.request_stop()
        aggregator.close()
    assert not alive(ranks[1]["pid"]), "the rank process outlived its aggregator"


def running_ranks(url):
    """The one learner's ranks when all of them run, else None."""
    learners = [w for w in get(url, "/workers")["workers"] if w["kind"] == "learner" and w["state"] == "busy"]
    if (
        len(learners) == 1
        and len(learners[0]["ranks"]) == 2
        and all(r["state"] == "running" for r in learners[0]["ranks"])
    ):
        return learners[0]
    return None


@pytest.mark.slow
def test_two_learner_ranks_under_run_survive_a_killed_rank(cli, tmp_path, toy_config):
    run, url = start_run(
        cli,
        tmp_path,
        toy_config,
        "--set",
        "env.stop_value=1000",
        "--set",
        "parallel.learner.world_size=2",
        "--set",
        "parallel.learner.collective_timeout=20",
        "--set",
        "parallel.learner.dedicated_cpu=false",
    )
    learner = eventually(lambda: running_ranks(url), timeout=90, message="one learner with 2 running ranks")
    workers = get(url, "/workers")["workers"]
    assert [w["worker_id"] for w in workers if w["kind"] == "learner"] == [learner["worker_id"]]
    rank0, rank1 = sorted(learner["ranks"], key=lambda r: r["rank"])
    assert rank0["pid"] == learner["pid"] and rank1["pid"] in child_pids(learner["pid"])
    # a learner state is saved every 20 iterations: wait for one, then kill rank 1
    eventually(lambda: get(url, "/cluster")["train_iter"] > 45, timeout=60, message="training")
    os.kill(rank1["pid"], signal.SIGKILL)
    eventually(
        lambda: any("rank 1" in p for w in get(url, "/learners")["learners"] for p in w["problems"]),
        timeout=60,
        message="the lost rank reported",
    )
    again = eventually(
        lambda: (lambda w: w if w and w["ranks"][1]["pid"] != rank1["pid"] else None)(running_ranks(url)),
        timeout=90,
        message="the group restarted",
    )
    assert again["worker_id"] == learner["worker_id"] and again["pid"] == learner["pid"]
    assert get(url, "/cluster")["learn_info"]["world_size"] == 2
    before = get(url, "/cluster")["train_iter"]
    eventually(lambda: get(url, "/cluster")["train_iter"] > before + 20, timeout=60, message="training continues")
    children = worker_pids(run.pid) + [again["ranks"][1]["pid"]]
    run.proc.send_signal(signal.SIGINT)
    assert run.wait(30) == 130
    assert not [pid for pid in children if alive(pid)]


@pytest.mark.slow
@pytest.mark.long  # make test-long: test_two_learner_ranks_under_run_survive_a_killed_rank trains two ranks in make test
def test_two_learner_ranks_solve_cartpole(cli, tmp_path):
    """The shipped CartPole config with 2 learner ranks reaches the stop value as one learner does
    (test_cluster.test_run_solves_cartpole); benchmarks/learner_parity.py compares the returns closely."""
    run, url = start_run(cli, tmp_path, "configs/cartpole_dqn_parallel.py", "--set", "parallel.learner.world_size=2")
    eventually(lambda: running_ranks(url), timeout=90, message="one learner with 2 running ranks")
    assert run.wait(300) == 0, run.output()[-3000:]
    assert re.search(r"^solved: eval return \d+\.\d >= stop value 195", run.output(), re.M)
