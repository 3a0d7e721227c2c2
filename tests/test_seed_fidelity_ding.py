"""Code written for DI-engine's ``ding.worker`` runs here unchanged: written from DI-engine's documented signatures
and behaviour (constructors' keywords, the ``_env`` / ``_policy`` resets, collect's defaults and argument order,
BaseLearner's parallel entry and properties, and a policy written in DI-engine's style)."""

import inspect
import logging
import os

import numpy as np
import pytest
from easydict import EasyDict

from parallel_rl.data import BUFFER_REGISTRY, create_buffer
from parallel_rl.envs import EnvManager
from parallel_rl.envs.multiagent import BattleEnvManager
from parallel_rl.policy.bots import create_bot
from parallel_rl.worker import (
    BaseLearner,
    BattleEpisodeSerialCollector,
    BattleInteractionSerialEvaluator,
    BattleSampleSerialCollector,
    EpisodeSerialCollector,
    InteractionSerialEvaluator,
    MetricSerialEvaluator,
    SampleSerialCollector,
    create_learner,
    create_serial_collector,
    create_serial_evaluator,
)

from .support import ConstantPolicy, eventually
from .test_learner import FakeLearnMode, learner_cfg


class RecordingWriter:
    """What DI-engine hands its workers as ``tb_logger``: a SummaryWriter's ``add_scalar(tag, value, step)``."""

    def __init__(self):
        self.scalars = []

    def add_scalar(self, tag, value, step):
        self.scalars.append((tag, float(value), int(step)))

    def tags(self, prefix):
        return {(t, s) for t, _, s in self.scalars if t.startswith(prefix)}


def counting(n=4):
    return EnvManager("parallel_rl/Counting-v0", n, seed=0, env_kwargs={"episode_length": 5})


def countdown(n=2):
    return BattleEnvManager.from_cfg(EasyDict(env_id="parallel_rl.envs.toy_battle:countdown_env"), n, seed=0)


# ---- (1) the serial pipeline's keywords: tb_logger, exp_name, instance_name ---------------------------------
@pytest.mark.parametrize("kind", ["sample", "episode"])
def test_create_serial_collector_takes_the_pipeline_keywords_and_writes_to_tb_logger(kind):
    writer = RecordingWriter()
    collector = create_serial_collector(
        EasyDict(type=kind, n_sample=8, n_episode=4),
        env=counting(),
        policy=ConstantPolicy(1),
        tb_logger=writer,
        exp_name="exp",
        instance_name="my_collector",
    )
    collector.collect(train_iter=3)
    assert ("my_collector_iter/envstep_count", 3) in writer.tags("my_collector_iter/")
    assert any(t == "my_collector_step/envstep_count" for t, _ in writer.tags("my_collector_step/"))
    collector.close()


def test_battle_collectors_take_the_pipeline_keywords():
    first = create_bot("first_legal")
    for cls in (BattleSampleSerialCollector, BattleEpisodeSerialCollector):
        writer = RecordingWriter()
        collector = cls(
            EasyDict(trained_players=[0], n_sample=4, n_episode=2),
            countdown(),
            [first, first],
            tb_logger=writer,
            exp_name="exp",
            instance_name="battle",
        )
        collector.collect(train_iter=5)
        assert ("battle_iter/envstep_count", 5) in writer.tags("battle_iter/")
        collector.close()


def test_interaction_evaluator_reads_stop_value_and_n_episode_from_cfg_and_writes_to_tb_logger():
    writer = RecordingWriter()
    cfg = EasyDict(type="interaction", eval_freq=1, n_episode=4, stop_value=5.0)
    evaluator = create_serial_evaluator(
        cfg, env=counting(2), policy=ConstantPolicy(1), tb_logger=writer, exp_name="exp", instance_name="my_eval"
    )
    stop, info = evaluator.eval(train_iter=2, envstep=10)
    assert stop and info["episodes"] == 4  # Counting-v0 pays 1 per step with action 1: return 5 >= 5
    assert ("my_eval_iter/eval_episode_return_mean", 2) in writer.tags("my_eval_iter/")
    assert ("my_eval_step/eval_episode_return_mean", 10) in writer.tags("my_eval_step/")
    strict = InteractionSerialEvaluator(EasyDict(n_episode=2, stop_value=5.5), counting(2), ConstantPolicy(1))
    assert strict.eval()[0] is False


def test_battle_evaluator_takes_the_pipeline_keywords_and_cfg_values():
    first = create_bot("first_legal")
    evaluator = BattleInteractionSerialEvaluator(
        EasyDict(n_episode=2, stop_value=0.0),
        countdown(),
        first,
        {"first_legal": first},
        tb_logger=RecordingWriter(),
        exp_name="exp",
        instance_name="battle_eval",
    )
    stop, info = evaluator.eval()
    assert stop and info["results"]["first_legal"]["first"]["games"] == 2


def test_create_learner_takes_the_pipeline_keywords(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    writer = RecordingWriter()
    learner = create_learner(
        learner_cfg(log_show_after_iter=1),
        FakeLearnMode(),
        tb_logger=writer,
        exp_name="my_exp",
        instance_name="my_learner",
    )
    assert (learner.exp_name, learner.instance_name, learner.tb_logger) == ("my_exp", "my_learner", writer)
    learner.train({"x": np.ones(2)})
    assert any(t == "my_learner_iter/loss" for t, _ in writer.tags("my_learner_iter/"))
    learner.save_checkpoint()  # DI-engine: under ./<exp_name>/ckpt
    assert list((tmp_path / "my_exp" / "ckpt").iterdir())
    # DI-engine's positional order: cfg, policy, tb_logger, dist_info, exp_name, instance_name
    other = create_learner(learner_cfg(), FakeLearnMode(), writer, (0, 1), "e2", "l2")
    assert (other.tb_logger, other.rank, other.world_size, other.exp_name, other.instance_name) == (
        writer,
        0,
        1,
        "e2",
        "l2",
    )


@pytest.mark.parametrize("kind", BUFFER_REGISTRY.names())
def test_create_buffer_and_the_buffers_take_the_pipeline_keywords(kind):
    cfg = EasyDict(type=kind, replay_buffer_size=16)
    buffer = create_buffer(cfg, tb_logger=RecordingWriter(), exp_name="exp", instance_name="my_buffer")
    assert buffer.count() == 0
    positional = BUFFER_REGISTRY.get(kind)(cfg, RecordingWriter(), "exp", "my_buffer")
    assert positional.replay_buffer_size == 16


# ---- (2) resets with DI-engine's keyword names, collect's defaults and argument order --------------------
def _serial_workers():
    first = create_bot("first_legal")
    yield SampleSerialCollector(None, counting(), ConstantPolicy(1)), counting, lambda: ConstantPolicy(0)
    yield EpisodeSerialCollector(None, counting(), ConstantPolicy(1)), counting, lambda: ConstantPolicy(0)
    yield BattleSampleSerialCollector(None, countdown(), [first, first]), countdown, lambda: [first, first]
    yield BattleEpisodeSerialCollector(None, countdown(), [first, first]), countdown, lambda: [first, first]
    yield (
        InteractionSerialEvaluator(EasyDict(n_episode=4, stop_value=1.0), counting(), ConstantPolicy(1)),
        counting,
        lambda: ConstantPolicy(0),
    )
    yield (
        BattleInteractionSerialEvaluator(
            EasyDict(n_episode=2, stop_value=1.0), countdown(), first, {"first_legal": first}
        ),
        countdown,
        lambda: first,
    )


def test_every_serial_collector_and_evaluator_resets_with_di_engines_keywords():
    for worker, make_env, make_policy in _serial_workers():
        name = type(worker).__name__
        for method, keywords in (
            ("reset_env", ["_env"]),
            ("reset_policy", ["_policy"]),
            ("reset", ["_policy", "_env"]),
        ):
            params = list(inspect.signature(getattr(worker, method)).parameters.values())
            assert [p.name for p in params[: len(keywords)]] == keywords, f"{name}.{method}"
            assert all(p.default is None for p in params[: len(keywords)]), f"{name}.{method}"
        worker.reset_env(_env=make_env())
        worker.reset_policy(_policy=make_policy())
        worker.reset(_policy=make_policy(), _env=make_env())
        worker.close()
    params = inspect.signature(MetricSerialEvaluator.reset).parameters
    assert list(params)[1:3] == ["_policy", "_env"]


def test_episode_collector_collects_cfg_n_episode_by_default():
    collector = EpisodeSerialCollector(EasyDict(n_episode=4), counting(), ConstantPolicy(1))
    assert len(collector.collect()) == 4
    with pytest.raises(ValueError, match="n_episode"):
        EpisodeSerialCollector(None, counting(), ConstantPolicy(1)).collect()


def test_battle_sample_collector_takes_di_engines_argument_order_and_cfg_default():
    first = create_bot("first_legal")
    collector = BattleSampleSerialCollector(EasyDict(n_sample=3), countdown(), [first, first])
    # DI-engine: collect(n_sample=None, train_iter=0, drop_extra=True, policy_kwargs=None)
    names = list(inspect.signature(collector.collect).parameters)
    assert names[:4] == ["n_sample", "train_iter", "drop_extra", "policy_kwargs"]
    assert len(collector.collect()[0]["obs"]) == 3
    everything = collector.collect(3, 0, False, None)[0]
    assert len(everything["obs"]) >= 3
    episodes = BattleEpisodeSerialCollector(EasyDict(n_episode=2), countdown(), [first, first])
    assert len(episodes.collect()[0]) == 2


# ---- (3) BaseLearner: the parallel entry and the documented properties --------------------------------------
def test_learner_start_runs_cfg_train_iterations_without_arguments():
    cfg = learner_cfg()
    cfg.train_iterations = 3
    learner = BaseLearner(cfg, FakeLearnMode())
    learner.setup_dataloader(lambda: {"x": np.ones(2)})
    learner.start()
    assert learner.train_iter == 3
    assert learner.learn_info["learner_step"] == 3 and learner.learn_info["learner_done"] is True
    assert "priority_info" in learner.learn_info


def test_learner_save_checkpoint_takes_ckpt_name_and_the_documented_properties(tmp_path, caplog):
    learner = BaseLearner(learner_cfg(), FakeLearnMode(), exp_dir=str(tmp_path))
    learner.train({"x": np.array([1.0, 3.0])})
    learner.save_checkpoint(ckpt_name="best.pt")
    assert (tmp_path / "ckpt" / "best.pt").exists()
    assert learner.last_iter.val == 1  # DI-engine's CountVar
    assert learner.log_buffer["scalar"]["loss"] == 2.0
    assert set(learner.log_buffer) >= {"scalar", "scalars", "histogram"}
    assert isinstance(learner.logger, logging.Logger)
    learner.monitor.loss = 2.0  # DI-engine's hooks set the learner's variables on its monitor
    with caplog.at_level(logging.INFO):
        learner.info("hello from a hook")
    assert "hello from a hook" in caplog.text


class TaggedLearnMode(FakeLearnMode):
    def forward(self, batch):
        return {"loss": 1.0, "[histogram]q": batch["x"], "[scalars]lr": {"actor": 0.1}}


def test_learner_log_buffer_sorts_tagged_values_as_di_engine_does():
    learner = BaseLearner(learner_cfg(), TaggedLearnMode())
    learner.train({"x": np.arange(3.0)})
    buffer = learner.log_buffer
    assert buffer["scalar"] == {"loss": 1.0, "train_iter": 1, "envstep": -1}
    assert buffer["scalars"] == {"lr": {"actor": 0.1}}
    np.testing.assert_array_equal(buffer["histogram"]["q"], np.arange(3.0))


# ---- (4) DI-engine's policy contract: a policy written in DI-engine's style drives our collector and learner ---
class DingStyleDQN:
    """A small DQN written the way DI-engine's policies are: modes are namedtuples of functions; the collect
    mode acts on ``{env_id: obs}``, builds transitions and n-step samples itself; the learn mode takes a
    list of sample dicts and returns its scalars with the samples' ``priority``."""

    def __init__(self, obs_dim=4, action_num=2, nstep=3, gamma=0.99, lr=1e-3, n_sample=32, seed=0):
        import torch

        torch.manual_seed(seed)
        self._nstep, self._gamma, self._n_sample = nstep, gamma, n_sample
        self._model = torch.nn.Sequential(
            torch.nn.Linear(obs_dim, 64), torch.nn.ReLU(), torch.nn.Linear(64, action_num)
        )
        self._target = torch.nn.Sequential(
            torch.nn.Linear(obs_dim, 64), torch.nn.ReLU(), torch.nn.Linear(64, action_num)
        )
        self._target.load_state_dict(self._model.state_dict())
        self._optimizer = torch.optim.Adam(self._model.parameters(), lr=lr)
        self._action_num = action_num
        self._rng = np.random.default_rng(seed)
        self._updates = 0
        self.reset_calls = []
        self.seen_keys = set()

    # ---- DI-engine's mode namedtuples ---------------------------------------------------------
    @property
    def collect_mode(self):
        from collections import namedtuple

        fields = [
            "forward",
            "process_transition",
            "get_train_sample",
            "reset",
            "get_attribute",
            "set_attribute",
            "state_dict",
            "load_state_dict",
        ]
        return namedtuple("collect_function", fields)(
            self._forward_collect,
            self._process_transition,
            self._get_train_sample,
            self._reset_collect,
            self._get_attribute,
            setattr,
            self._state_dict,
            self._load_state_dict,
        )

    @property
    def learn_mode(self):
        from collections import namedtuple

        fields = [
            "forward",
            "reset",
            "info",
            "monitor_vars",
            "get_attribute",
            "set_attribute",
            "state_dict",
            "load_state_dict",
        ]
        return namedtuple("learn_function", fields)(
            self._forward_learn,
            lambda data_id=None: None,
            lambda: "DingStyleDQN",
            self._monitor_vars,
            self._get_attribute,
            setattr,
            self._state_dict,
            self._load_state_dict,
        )

    def _get_attribute(self, name):
        return {"n_sample": self._n_sample, "unroll_len": 1, "cfg": EasyDict(traj_len_inf=False)}[name]

    # ---- collect mode ---------------------------------------------------------------------------
    def _forward_collect(self, data, eps):
        import torch

        env_ids = list(data.keys())
        obs = torch.stack([torch.as_tensor(np.asarray(data[i]), dtype=torch.float32) for i in env_ids])
        with torch.no_grad():
            logit = self._model(obs)
        action = logit.argmax(dim=-1)
        explore = torch.as_tensor(self._rng.random(len(env_ids)) < eps)
        action = torch.where(explore, torch.as_tensor(self._rng.integers(0, self._action_num, len(env_ids))), action)
        return {i: {"logit": logit[k], "action": action[k]} for k, i in enumerate(env_ids)}

    def _process_transition(self, obs, policy_output, timestep):
        return {
            "obs": obs,
            "next_obs": timestep.obs,
            "action": policy_output["action"],
            "reward": timestep.reward,
            "done": timestep.done,
        }

    def _get_train_sample(self, data):
        import torch

        samples = []
        for t in range(len(data)):
            window = data[t : t + self._nstep]
            reward = sum(self._gamma**k * float(w["reward"][0]) for k, w in enumerate(window))
            samples.append(
                {
                    "obs": data[t]["obs"],
                    "action": data[t]["action"],
                    "next_obs": window[-1]["next_obs"],
                    "done": window[-1]["done"],
                    "reward": torch.tensor(reward, dtype=torch.float32),
                    "discount": torch.tensor(self._gamma ** len(window), dtype=torch.float32),
                }
            )
        return samples

    def _reset_collect(self, data_id=None):
        self.reset_calls.append(data_id)

    # ---- learn mode ---------------------------------------------------------------------------
    def _forward_learn(self, data):
        import torch

        self.seen_keys |= set(data[0])
        batch = {k: torch.stack([d[k] for d in data]) for k in data[0]}
        q = self._model(batch["obs"].float()).gather(1, batch["action"].long().unsqueeze(1)).squeeze(1)
        with torch.no_grad():
            target = (
                batch["reward"]
                + batch["discount"]
                * (1 - batch["done"].float())
                * self._target(batch["next_obs"].float()).max(dim=1).values
            )
        td = target - q
        loss = (batch["IS"].float() * td.pow(2)).mean()
        self._optimizer.zero_grad()
        loss.backward()
        self._optimizer.step()
        self._updates += 1
        if self._updates % 50 == 0:
            self._target.load_state_dict(self._model.state_dict())
        return {
            "cur_lr": 1e-3,
            "total_loss": loss.item(),
            "q_value": q.mean().item(),
            "priority": td.abs().detach().numpy().tolist(),
        }

    def _monitor_vars(self):
        return ["cur_lr", "total_loss", "q_value"]

    def _state_dict(self):
        return {"model": self._model.state_dict()}

    def _load_state_dict(self, state):
        self._model.load_state_dict(state["model"])


def test_a_policy_written_in_di_engines_style_trains_through_our_collector_and_learner():
    from parallel_rl.data import AdvancedReplayBuffer

    policy = DingStyleDQN(n_sample=32)
    env = EnvManager("CartPole-v1", 4, seed=0)
    # DI-engine's serial entry: the modes go in as they are; n_sample comes from the policy
    collector = create_serial_collector(EasyDict(type="sample"), env=env, policy=policy.collect_mode)
    learner = create_learner(learner_cfg(), policy.learn_mode)
    buffer = AdvancedReplayBuffer(EasyDict(replay_buffer_size=4000, alpha=0.6, beta=0.4))
    losses = []
    while learner.train_iter < 300:
        data = collector.collect(train_iter=learner.train_iter, policy_kwargs={"eps": 0.3})
        assert len(data["obs"]) == 32 and data["obs"].shape[1:] == (4,)
        buffer.push(data, cur_collector_envstep=collector.envstep)
        for _ in range(3):
            learner.train(buffer.sample(32, learner.train_iter), collector.envstep)
            assert learner.priority_info["priority"].shape == (32,)
            buffer.update(learner.priority_info)  # DI-engine's serial entry feeds the priorities back
            losses.append(learner.learn_info["total_loss"])
    assert np.all(np.isfinite(losses))
    assert {"replay_buffer_idx", "replay_unique_id", "IS"} <= policy.seen_keys
    weights = buffer.sample(256, learner.train_iter)["weight"]
    assert weights.std() > 0  # the priorities came back: samples are no longer equally likely
    assert any(ids is not None and len(ids) == 1 for ids in policy.reset_calls)  # episode ends reset the env
    # the discount column the policy's own n-step samples carry: gamma^k for k <= nstep
    gaps = np.abs(data["discount"][:, None] - 0.99 ** np.arange(1, 4)[None, :]).min(axis=1)
    assert gaps.max() < 1e-5
    env.close()


def _with_eval_mode(policy):
    """DingStyleDQN's eval mode: greedy actions on ``{env_id: obs}``, as DI-engine's ``_forward_eval``."""
    from collections import namedtuple

    def forward_eval(data):
        return policy._forward_collect(data, eps=0.0)

    resets = []
    mode = namedtuple(
        "eval_function", ["forward", "reset", "get_attribute", "set_attribute", "state_dict", "load_state_dict"]
    )(forward_eval, resets.append, policy._get_attribute, setattr, policy._state_dict, policy._load_state_dict)
    return mode, resets


def test_di_engines_serial_entry_wiring_runs_unchanged(tmp_path, monkeypatch):
    """The construction and loop of DI-engine's ``serial_pipeline``, line for line in its calls."""
    from parallel_rl.data import create_buffer

    monkeypatch.chdir(tmp_path)
    cfg = EasyDict(
        exp_name="cartpole_dqn",
        policy=EasyDict(
            learn=EasyDict(learner=learner_cfg(), update_per_collect=2),
            collect=EasyDict(collector=EasyDict(type="sample")),
            eval=EasyDict(evaluator=EasyDict(type="interaction", eval_freq=20, n_episode=2, stop_value=1e9)),
            other=EasyDict(replay_buffer=EasyDict(type="advanced", replay_buffer_size=2000)),
        ),
    )
    policy = DingStyleDQN(n_sample=16)
    eval_mode, eval_resets = _with_eval_mode(policy)
    tb_logger = RecordingWriter()
    learner = BaseLearner(cfg.policy.learn.learner, policy.learn_mode, tb_logger, exp_name=cfg.exp_name)
    collector = create_serial_collector(
        cfg.policy.collect.collector,
        env=EnvManager("CartPole-v1", 2, seed=0),
        policy=policy.collect_mode,
        tb_logger=tb_logger,
        exp_name=cfg.exp_name,
    )
    evaluator = create_serial_evaluator(
        cfg.policy.eval.evaluator,
        env=EnvManager("CartPole-v1", 2, seed=1),
        policy=eval_mode,
        tb_logger=tb_logger,
        exp_name=cfg.exp_name,
    )
    replay_buffer = create_buffer(cfg.policy.other.replay_buffer, tb_logger=tb_logger, exp_name=cfg.exp_name)
    evaluations = 0
    while learner.train_iter < 60:
        if evaluator.should_eval(learner.train_iter):
            stop, eval_info = evaluator.eval(learner.save_checkpoint, learner.train_iter, collector.envstep)
            evaluations += 1
            assert not stop and eval_info["episodes"] == 2
        new_data = collector.collect(train_iter=learner.train_iter, policy_kwargs={"eps": 0.5})
        replay_buffer.push(new_data, cur_collector_envstep=collector.envstep)
        for _ in range(cfg.policy.learn.update_per_collect):
            train_data = replay_buffer.sample(16, learner.train_iter)
            if train_data is None:
                break
            learner.train(train_data, collector.envstep)
            replay_buffer.update(learner.priority_info)
    assert evaluations == 3  # train_iter 0, 20, 40
    assert (tmp_path / "cartpole_dqn" / "ckpt" / "ckpt_best.pt").exists()  # eval's new best, via save_checkpoint
    assert tb_logger.tags("evaluator_iter/") and tb_logger.tags("collector_iter/")
    assert None in eval_resets and any(ids is not None for ids in eval_resets)  # DI-engine resets the eval policy


# ---- (2) the strict audit's fixes (benchmarks/api_audit.py): DI-engine's signatures and behaviour -----------
def test_sample_collector_drop_extra_drops_the_surplus_as_di_engine_does():
    # DI-engine: `if drop_extra: return return_data[:n_sample] else: return return_data`; nothing is carried
    collector = SampleSerialCollector(None, counting(4), ConstantPolicy(1))
    assert len(collector.collect(n_sample=7)["obs"]) == 7 and collector.envstep == 8  # two steps of 4 envs
    assert len(collector.collect(n_sample=1)["obs"]) == 1 and collector.envstep == 12  # the surplus row is gone
    assert len(collector.collect(n_sample=7, drop_extra=False)["obs"]) == 8  # everything collected
    collector.close()


def test_battle_sample_collector_drop_extra_drops_the_surplus():
    first = create_bot("first_legal")
    collector = BattleSampleSerialCollector(None, countdown(2), [first, first])
    assert len(collector.collect(n_sample=4)[0]["obs"]) == 4
    before = collector.envstep
    collector.collect(n_sample=1)  # the row completed beyond 4 was dropped: this one needs new moves
    assert collector.envstep > before
    collector.close()


def test_episode_collector_returns_every_episode_finished_by_the_last_step():
    # DI-engine's loop handles every env of the step that makes collected_episode >= n_episode, then breaks
    collector = EpisodeSerialCollector(None, counting(4), ConstantPolicy(1))
    episodes = collector.collect(n_episode=3)  # all 4 envs end their 5-step episode in the same step
    assert len(episodes) == 4 and collector.envstep == 20
    collector.close()


def test_collectors_and_evaluators_take_tb_logger_as_their_fourth_argument():
    # DI-engine: (cfg, env=None, policy=None, tb_logger=None, exp_name='default_experiment', instance_name=...)
    first = create_bot("first_legal")
    for cls, env, policy, count in [
        (SampleSerialCollector, counting(), ConstantPolicy(1), 4),
        (EpisodeSerialCollector, counting(), ConstantPolicy(1), 4),
        (BattleSampleSerialCollector, countdown(), [first, first], 2),
        (BattleEpisodeSerialCollector, countdown(), [first, first], 2),
    ]:
        writer = RecordingWriter()
        collector = cls(None, env, policy, writer, "exp", "mine")
        collector.collect(count, 5)
        assert ("mine_iter/envstep_count", 5) in writer.tags("mine_iter/"), cls.__name__
        collector.close()
    writer = RecordingWriter()
    evaluator = InteractionSerialEvaluator(
        EasyDict(n_episode=4, stop_value=5.0), counting(), ConstantPolicy(1), writer, "exp", "my_eval"
    )
    evaluator.eval(train_iter=2)
    assert writer.tags("my_eval_iter/") and evaluator.instance_name == "my_eval"
    evaluator.close()


def test_collectors_and_evaluators_take_env_and_policy_later():
    # DI-engine's env=None / policy=None: given later through reset_env / reset_policy
    collector = SampleSerialCollector(EasyDict(n_sample=4))
    with pytest.raises(RuntimeError, match="reset_env"):
        collector.collect()
    collector.reset_env(counting())
    collector.reset_policy(ConstantPolicy(1))
    assert len(collector.collect()["obs"]) == 4
    collector.close()
    episodes = EpisodeSerialCollector(EasyDict(n_episode=4), policy=ConstantPolicy(1))
    episodes.reset_env(counting())
    assert len(episodes.collect()) == 4
    episodes.close()
    first = create_bot("first_legal")
    battle = BattleSampleSerialCollector(EasyDict(n_sample=2))
    battle.reset(_policy=[first, first], _env=countdown())
    assert len(battle.collect()[0]["obs"]) == 2
    battle.close()
    evaluator = InteractionSerialEvaluator(EasyDict(n_episode=4, stop_value=5.0))
    with pytest.raises(RuntimeError, match="reset_env"):
        evaluator.eval()
    evaluator.reset(_policy=ConstantPolicy(1), _env=counting())
    stop, info = evaluator.eval()
    assert stop and info["eval_episode_return_mean"] == 5.0
    evaluator.close()


def test_after_iter_hooks_see_train_iter_before_the_update_is_counted(tmp_path):
    # DI-engine's train: before_iter hooks, the update, after_iter hooks, then self._last_iter.add(1)
    seen = []

    class Watch:
        name, priority = "watch", 50

        def __init__(self, position):
            self.position = position

        def __call__(self, learner):
            seen.append((self.position, learner.train_iter, learner.last_iter.val))

    learner = BaseLearner(learner_cfg(save_ckpt_after_iter=1), FakeLearnMode(), exp_dir=str(tmp_path))
    learner.register_hook(Watch("before_iter"))
    learner.register_hook(Watch("after_iter"))
    learner.train({"x": np.ones(1)})
    learner.train({"x": np.ones(1)})
    assert seen == [("before_iter", 0, 0), ("after_iter", 0, 0), ("before_iter", 1, 1), ("after_iter", 1, 1)]
    assert learner.train_iter == 2
    # ours: iteration_<N>.pt holds N updates and resumes at N
    names = sorted(p.name for p in (tmp_path / "ckpt").iterdir())
    assert names == ["iteration_1.pt", "iteration_2.pt"]
    other = BaseLearner(learner_cfg(load_ckpt_before_run=str(tmp_path / "ckpt" / "iteration_2.pt")), FakeLearnMode())
    other.call_hook(name="before_run")
    assert other.train_iter == 2


def test_learner_log_buffer_is_settable_and_setup_dataloader_takes_get_data():
    learner = BaseLearner(EasyDict({**learner_cfg(), "batch_size": 3, "train_iterations": 2}), FakeLearnMode())
    learner.log_buffer = {"scalar": {"mine": 1.0}, "scalars": {}, "histogram": {}}  # a hook's own values
    assert learner.log_buffer["scalar"] == {"mine": 1.0}
    asked = []

    def get_data(batch_size):  # what DI-engine's comm helper sets on the learner
        asked.append(batch_size)
        return {"x": np.ones(batch_size)}

    learner.get_data = get_data
    learner.setup_dataloader()
    learner.start()
    assert asked == [3, 3] and learner.train_iter == 2
    assert "mine" not in learner.log_buffer["scalar"]  # a new update's values
    with pytest.raises(ValueError, match="get_data"):
        BaseLearner(learner_cfg(), FakeLearnMode()).setup_dataloader()


def test_learner_hook_helpers_take_di_engines_parameter_names():
    from parallel_rl.learner.learner import SaveCkptHook
    from parallel_rl.worker import build_learner_hook_by_cfg, merge_hooks, register_learner_hook

    register_learner_hook(name="save_ckpt_again", hook_type=SaveCkptHook)
    hooks = build_learner_hook_by_cfg(cfg={"save_ckpt_again_after_iter": 3})
    assert [h.name for h in hooks["after_iter"]] == ["save_ckpt_again"]
    merged = merge_hooks(hooks1=hooks, hooks2=build_learner_hook_by_cfg(cfg={"log_show_after_iter": 5}))
    assert [h.name for h in merged["after_iter"]] == ["save_ckpt_again", "log_show"]


def test_buffers_take_di_engines_parameter_names_beta_setter_and_episode_len(tmp_path):
    from parallel_rl.data import AdvancedReplayBuffer, EpisodeReplayBuffer, NaiveReplayBuffer

    naive = NaiveReplayBuffer(EasyDict(replay_buffer_size=8))
    naive.push({"obs": np.arange(4.0)}, 0)
    naive.save_data(file_name=str(tmp_path / "buffer.npz"))
    other = NaiveReplayBuffer(EasyDict(replay_buffer_size=8))
    other.load_data(file_name=str(tmp_path / "buffer.npz"))
    assert other.count() == 4
    other.load_state_dict(_state_dict=naive.state_dict())
    advanced = AdvancedReplayBuffer(EasyDict(replay_buffer_size=8, beta=0.4))
    advanced.beta = 0.7
    assert advanced.beta == pytest.approx(0.7)
    advanced.push({"obs": np.arange(4.0)}, 0)
    copy = AdvancedReplayBuffer(EasyDict(replay_buffer_size=8))
    copy.load_state_dict(advanced.state_dict(), deepcopy=True)
    assert copy.count() == 4
    episodes = EpisodeReplayBuffer(EasyDict(replay_buffer_size=4))
    episodes.push([{"obs": np.arange(3.0)}, {"obs": np.arange(5.0)}], 0)
    assert episodes.episode_len == [3, 5]


def test_vector_eval_monitor_has_di_engines_reward_and_video_methods():
    from parallel_rl.worker import VectorEvalMonitor

    monitor = VectorEvalMonitor(env_num=2, n_episode=4)
    frames = {0: np.zeros((4, 6, 3)), 1: np.ones((4, 6, 3))}
    monitor.update_video(frames)
    monitor.update_video({0: np.zeros((4, 6, 3))})
    for env_id, reward in [(0, 1.0), (1, 3.0), (0, 2.0), (1, 4.0)]:
        monitor.update_reward(env_id, reward)
    assert monitor.get_episode_return() == [1.0, 2.0, 3.0, 4.0] and monitor.get_latest_reward(1) == 4.0
    assert monitor.get_current_episode() == 4 and monitor.is_finished()
    video = monitor.get_video()  # (N, T, C, H, W): the episodes with frames, worst first, padded to the longest
    assert video.shape == (2, 2, 3, 4, 6) and video[1].max() == 1.0


def test_serial_commander_policy_setter_changes_the_exploration_schedule():
    from parallel_rl.config import compile_config
    from parallel_rl.worker import BaseSerialCommander

    class Collector:
        envstep = 0

    class Learner:
        train_iter = 0

    commander = BaseSerialCommander(None, Learner(), Collector(), None, None)
    assert commander.step() == {}
    commander.policy = compile_config({}).policy  # DQN's eps schedule
    assert "eps" in commander.step()


def test_to_tensor_transitions_takes_shallow_copy_next_obs():
    from parallel_rl.worker import to_tensor_transitions

    columns = {"obs": np.ones((2, 3), np.float32)}
    for tensors in (to_tensor_transitions(columns, shallow_copy_next_obs=False), to_tensor_transitions(columns, True)):
        assert tuple(tensors["obs"].shape) == (2, 3) and tensors["obs"].device.type == "cpu"


def test_coordinator_state_dict_load_state_dict_and_info(tmp_path, caplog):
    from parallel_rl.worker import Coordinator
    from parallel_rl.storage import SharedStorage
    from tests.support import toy_cluster_config

    coordinator = Coordinator(toy_cluster_config(tmp_path), SharedStorage(str(tmp_path / "shared")), "token")
    coordinator.load_state_dict(state_dict=coordinator.state_dict())
    with caplog.at_level(logging.INFO, logger="parallel_rl.coordinator.coordinator"):
        coordinator.info("hello")
        coordinator.error("trouble")
    assert "coordinator: hello" in caplog.text and "coordinator: trouble" in caplog.text
    coordinator.close(notify_workers=False)


def test_parallel_collector_finish_info_env_manager_and_comm_names(tmp_path, caplog):
    from parallel_rl.compat.ding import FlaskFileSystemCollector, ZerglingParallelCollector
    from parallel_rl.storage import SharedStorage
    from tests.support import toy_cluster_config

    cfg = toy_cluster_config(tmp_path)
    collector = ZerglingParallelCollector(cfg, SharedStorage(str(tmp_path / "shared")), seed=0)
    try:
        collector.collect(8, eps=0.0)
        info = collector.get_finish_info()
        assert info["step_count"] >= 8 and info["train_iter"] == collector.policy_version
        collector.env_manager = EnvManager("parallel_rl/Counting-v0", 3, seed=1, env_kwargs={"episode_length": 5})
        assert collector.env_manager.num_envs == 3
        collector.collect(6, eps=0.0)
        assert collector.get_finish_info()["step_count"] == 6  # two steps of the new 3 envs
        for action in (0, 1):  # DI-engine's policy setter: the collector acts with the new policy

            class Fixed:
                collect_mode, flow = ConstantPolicy(action), collector.policy.flow

            collector.policy = Fixed()
            data, _ = collector.collect(6, eps=0.0)
            assert data["action"].tolist() == [action] * 6
        with caplog.at_level(logging.INFO):
            collector.info("collecting")
        assert "collecting" in caplog.text
        slave = FlaskFileSystemCollector(token="t", shared_dir=str(tmp_path / "shared"))
        try:  # a slave serves from its construction (the port is known): closed, or its threads hold the exit
            slave.collector = collector  # what the slave's setup builds
            path = slave.send_stepdata(path="chunk-1", stepdata={"obs": np.zeros((2, 1), np.float32)})
            assert path.endswith(".npz") and "chunk-1" in path
            slave.send_metadata(metadata={"type": "noop"})  # not connected: nothing to send it to
        finally:
            slave.collector = None  # the test's own, closed below: the slave tears down what its set-up built
            slave.close()
    finally:
        collector.close()


def test_learner_aggregator_merges_learn_info_by_mean():
    from parallel_rl.worker import LearnerAggregator

    assert LearnerAggregator.merge_info([{"loss": 1.0, "q": 2.0}, {"loss": 3.0, "q": 4.0}]) == {"loss": 2.0, "q": 3.0}


def test_marine_collector_policy_setter_plays_the_new_policy_against_the_current_opponent(tmp_path):
    from parallel_rl.compat.ding import MarineParallelCollector
    from parallel_rl.config import compile_config
    from parallel_rl.storage import SharedStorage

    cfg = compile_config(
        {
            "env": {
                "type": "pettingzoo",
                "env_id": "parallel_rl.envs.toy_battle:countdown_env",
                "collector_env_num": 2,
                "evaluator_env_num": 2,
                "n_evaluator_episode": 4,
            },
            "policy": {"model": {"hidden_size_list": [8]}, "nstep": 1},
        }
    )
    collector = MarineParallelCollector(cfg, SharedStorage(str(tmp_path / "shared")), seed=0)
    try:
        collector.set_opponent("first_legal")
        player = ConstantPolicy(0)  # "take 1": always legal

        class Fixed:
            collect_mode, flow = player, collector.policy.flow

        collector.policy = Fixed()
        data, _ = collector.collect(6, eps=0.0)
        assert player.calls and data["action"].tolist() == [0] * 6 and collector.opponent == "first_legal"
    finally:
        collector.close()


def test_coordinator_and_parallel_collector_are_built_from_cfg_alone(tmp_path):
    # DI-engine: Coordinator(cfg), ZerglingParallelCollector(cfg); the shared store is the run's
    from parallel_rl.compat.ding import ZerglingParallelCollector
    from parallel_rl.worker import Coordinator
    from tests.support import toy_cluster_config

    cfg = toy_cluster_config(tmp_path)
    coordinator = Coordinator(cfg)
    collector = ZerglingParallelCollector(cfg)
    try:
        assert os.path.samefile(coordinator.storage.root, tmp_path / "exp" / "shared")
        assert collector.storage.root == coordinator.storage.root and collector.cfg is cfg
    finally:
        collector.close()
        coordinator.close(notify_workers=False)


# ---- DI-engine's coordinator callbacks (Coordinator.deal_with_*), called as its comm layer calls them --------------
from .test_coordinator import api, slaves  # noqa: E402,F401  (the scripted slaves on the real slave shell)


def test_only_di_engines_coordinator_has_its_callbacks():
    # issue 42 item 4: DI-engine's surface is an adapter in compat; the core coordinator inherits nothing of it
    from parallel_rl import coordinator, worker

    callbacks = {name for name in dir(worker.Coordinator) if name.startswith("deal_with_")}
    assert len(callbacks) == 9 and issubclass(worker.Coordinator, coordinator.Coordinator)
    assert not [name for name in dir(coordinator.Coordinator) if name.startswith("deal_with_")]
    assert not hasattr(coordinator.Coordinator, "default_config")
    assert [c.__module__ for c in coordinator.Coordinator.__mro__] == [
        "parallel_rl.coordinator.coordinator",
        "builtins",
    ]


def test_coordinator_collector_callbacks_announce_judge_and_finish_a_collector_task(
    ding_coordinator_factory,
    slaves,  # noqa: F811
    caplog,
):
    coordinator, server = ding_coordinator_factory()
    collector = slaves("collector", server.url)
    assert collector.got_task.wait(5)
    task_id = collector.received[0].task_id  # its spec: 64 env steps
    for name, n in (("d-1", 8), ("d-2", 56)):
        collector.storage.chunks.write(name, {"obs": np.zeros((n, 1), np.float32), "action": np.zeros(n, np.int64)})
    meta = {"policy_version": -1, "episode_returns": [1.0]}
    coordinator.deal_with_collector_send_data(task_id, "default", "d-1", {**meta, "size": 8, "env_steps": 8})
    assert api(server, "/buffers").json()["buffers"][0]["size"] == 8
    assert api(server, f"/tasks/{task_id}").json()["progress"] == {"env_steps": 8, "chunks": 1}
    assert coordinator.deal_with_collector_judge_finish(task_id, {}) is False
    coordinator.deal_with_collector_send_data(task_id, "default", "d-2", {**meta, "size": 56, "env_steps": 56})
    assert coordinator.deal_with_collector_judge_finish(task_id, {}) is True
    with caplog.at_level(logging.ERROR):  # DI-engine logs and drops what an unknown task sends
        coordinator.deal_with_collector_send_data("no-such-task", "default", "d-1", {**meta, "size": 8})
        assert coordinator.deal_with_collector_judge_finish("no-such-task", {}) is False
        coordinator.deal_with_collector_send_data(
            task_id, "default", "d-3", {**meta, "size": 8, "env_steps": 8}
        )  # no file
    assert "no-such-task" in caplog.text and "d-3" in caplog.text
    assert api(server, "/buffers").json()["buffers"][0]["size"] == 64
    coordinator.deal_with_collector_finish_task(task_id, {"step_count": 64})
    body = api(server, f"/tasks/{task_id}").json()
    assert body["state"] == "finished" and body["result"]["step_count"] == 64


def test_coordinator_learner_callbacks_sample_references_update_priorities_and_finish(ding_coordinator_factory, slaves):  # noqa: F811
    coordinator, server = ding_coordinator_factory(learner={"min_buffer_size": 8})
    collector = slaves("collector", server.url)
    learner = slaves("learner", server.url)
    assert collector.got_task.wait(5) and learner.got_task.wait(5)
    learner_task = learner.received[0].task_id
    assert coordinator.deal_with_learner_get_data(learner_task, "default", 4, 1) is None  # no data yet
    collector.write_chunk(collector.received[0].task_id, "c-1", n=8, version=-1)
    data = coordinator.deal_with_learner_get_data(learner_task, "default", 4, 1)
    assert len(data) == 4 and {d["data_id"] for d in data} == {"c-1"} and {d["row"] for d in data} <= set(range(8))
    priority = {
        "replay_buffer_idx": [d["replay_buffer_idx"] for d in data],
        "replay_unique_id": [d["replay_unique_id"] for d in data],
        "priority": [5.0] * 4,
    }
    coordinator.deal_with_learner_send_info(
        learner_task, "default", {"learner_step": 3, "priority_info": priority, "learner_info": {"loss": 0.5}}
    )
    assert api(server, "/cluster").json()["train_iter"] == 3 and coordinator.learn_info == {"loss": 0.5}
    with pytest.raises(ValueError):  # the priorities went into the replay index, which checks them
        coordinator.deal_with_learner_send_info(
            learner_task, "default", {"learner_step": 4, "priority_info": {**priority, "priority": [float("nan")] * 4}}
        )
    assert coordinator.deal_with_learner_judge_finish(learner_task, {}) is False
    with pytest.raises(RuntimeError, match="learner task"):  # DI-engine raises for an unknown learner task
        coordinator.deal_with_learner_get_data(collector.received[0].task_id, "default", 4, 1)
    coordinator.deal_with_learner_finish_task(learner_task, {"train_iter": 3})
    assert api(server, f"/tasks/{learner_task}").json()["state"] == "finished"
    coordinator.finish("solved", "test over")
    assert coordinator.deal_with_collector_judge_finish(collector.received[0].task_id, {}) is True


def test_coordinator_increase_and_decrease_collector_callbacks_take_no_arguments(ding_coordinator_factory, slaves):  # noqa: F811
    coordinator, server = ding_coordinator_factory()
    first = slaves("collector", server.url)
    assert first.got_task.wait(5)
    second = slaves("collector", server.url, run=False)
    coordinator.deal_with_increase_collector()  # DI-engine: after a collector joined
    eventually(lambda: len(api(server, "/tasks?kind=collector").json()["tasks"]) >= 2, timeout=5)
    coordinator.membership.decrease_collector(first.worker_id)
    coordinator.deal_with_decrease_collector()
    assert second.worker_id in {w["worker_id"] for w in api(server, "/collectors").json()["collectors"]}


# ---- DI-engine's slave callbacks (FlaskFileSystemCollector / FlaskFileSystemLearner / LearnerAggregator) ----------
def _comm_cfg(server):
    """A comm cfg as DI-engine's builds it (type and import_names pick the class), with our slave's keywords."""
    return EasyDict(
        {
            "type": "flask_fs",
            "import_names": [],
            "host": "127.0.0.1",
            "port": 0,
            "coordinator_url": server.url,
            "token": "test-token",
            "request_timeout": 2.0,
            "max_retries": 1,
        }
    )


def _within(fn, timeout=60.0):
    """``fn()`` in a thread, with a deadline (DI-engine's deal_with_collector_data waits for data)."""
    import concurrent.futures

    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return pool.submit(fn).result(timeout=timeout)


def test_flask_fs_collector_callbacks_start_hand_over_data_and_close(coordinator_factory):
    import threading

    from parallel_rl.compat.ding import FlaskFileSystemCollector

    coordinator, server = coordinator_factory()
    slave = FlaskFileSystemCollector(_comm_cfg(server)).start()
    threading.Thread(target=slave.run, daemon=True).start()
    try:
        resource = slave.deal_with_resource()
        assert resource["cpu"] >= 1 and resource["gpu"] >= 0
        seen = [_within(slave.deal_with_collector_data) for _ in range(2)]  # what went to the coordinator
        chunk = next(m for m in seen if m["type"] == "chunk")
        assert chunk["size"] > 0 and slave.storage.chunks.read(chunk["chunk"])["obs"].shape[0] == chunk["size"]
        slave.deal_with_collector_start({"task_id": "ding-task-1", "env_steps": 8})
        while True:  # the task runs in the worker loop, after the coordinator's
            message = _within(slave.deal_with_collector_data)
            if message.get("task_id") == "ding-task-1":
                break
        with pytest.raises(Exception, match="env_steps"):  # the slave checks it as an assigned task
            slave.deal_with_collector_start({"task_id": "ding-task-2"})
        info = slave.deal_with_collector_close()
        assert info["step_count"] > 0 and "train_iter" in info  # the finish info of its last task
    finally:
        slave.close()


def test_flask_fs_learner_callbacks_take_a_cfg_report_resources_and_close_the_running_task(coordinator_factory):
    import threading

    from parallel_rl.compat.ding import FlaskFileSystemLearner

    coordinator, server = coordinator_factory()
    learner = FlaskFileSystemLearner(_comm_cfg(server)).start()
    threading.Thread(target=learner.run, daemon=True).start()
    try:
        assert learner.deal_with_resource()["cpu"] >= 1
        running = eventually(lambda: learner.health()["running"], timeout=30, message="a learner task")
        with pytest.raises(Exception, match="already running"):  # one learner task at a time, as DI-engine's
            learner.deal_with_learner_start({"task_id": "ding-learn-1"})
        learner.deal_with_learner_close()
        eventually(
            lambda: api_task_state(server, running[0]) in ("finished", "cancelled"),
            timeout=30,
            message="the learner task wrapped up",
        )
    finally:
        learner.close()


def api_task_state(server, task_id):
    return api(server, f"/tasks/{task_id}").json()["state"]


def test_learner_aggregator_callbacks_take_a_cfg_report_resources_and_queue_a_task(tmp_path):
    from parallel_rl.worker import LearnerAggregator

    aggregator = LearnerAggregator({"type": "flask_fs", "token": "t", "shared_dir": str(tmp_path / "shared")})
    try:
        resource = aggregator.deal_with_get_resource()
        assert resource["world_size"] == 1 and resource["ranks"] == [] and resource["cpu"] >= 1
        aggregator.deal_with_learner_start({"task_id": "ding-learn-1", "resume": False})
        task = aggregator.inbox.get(timeout=5)
        assert (task.task_id, task.kind, task.spec) == ("ding-learn-1", "learner", {"resume": False})
        with pytest.raises(ValueError, match="task_id"):
            aggregator.deal_with_learner_start({"resume": False})
    finally:
        aggregator.close()


def test_create_parallel_collector_builds_zergling_or_marine_by_the_env(tmp_path):
    from parallel_rl.config import compile_config
    from parallel_rl.storage import SharedStorage
    from parallel_rl.worker import MarineParallelCollector, ZerglingParallelCollector, create_parallel_collector
    from tests.support import toy_cluster_config

    cfg = toy_cluster_config(tmp_path)
    battle = compile_config(
        {
            "env": {
                "type": "pettingzoo",
                "env_id": "parallel_rl.envs.toy_battle:countdown_env",
                "collector_env_num": 2,
                "evaluator_env_num": 2,
                "n_evaluator_episode": 4,
            },
            "policy": {"model": {"hidden_size_list": [8]}, "nstep": 1},
        }
    )
    for config, cls in ((cfg, ZerglingParallelCollector), (battle, MarineParallelCollector)):
        collector = (
            create_parallel_collector(config)
            if config is cfg
            else create_parallel_collector(config, SharedStorage(str(tmp_path / "battle")))
        )
        try:
            assert type(collector) is cls and collector.cfg is config
        finally:
            collector.close()


def test_a_comm_collector_written_against_di_engines_base_keeps_its_cfg():
    from parallel_rl.worker import BaseCommCollector, BaseCommLearner

    class MyCollector(BaseCommCollector):  # as DI-engine's docs write one: __init__(cfg) -> super().__init__(cfg)
        def __init__(self, cfg):
            super().__init__(cfg)

        def get_policy_update_info(self, path):
            return None

        def send_metadata(self, metadata):
            pass

        def send_stepdata(self, stepdata):
            return len(stepdata)

        def start(self):
            self._end_flag = False
            return self._cfg.host

        def close(self):
            self._end_flag = True

        @property
        def collector_uid(self):
            return "mine"

    class MyLearner(BaseCommLearner):
        def send_policy(self, state_dict):
            pass

        def get_data(self, batch_size):
            return [None] * batch_size

        def send_learn_info(self, learn_info):
            pass

        def start(self):
            return self._cfg.port

        def close(self):
            pass

    collector = MyCollector(EasyDict(host="127.0.0.1"))
    assert collector.start() == "127.0.0.1" and collector.send_stepdata(stepdata=[1, 2]) == 2
    assert MyLearner(EasyDict(port=1)).start() == 1 and MyLearner(EasyDict(port=1)).get_data(batch_size=3) == [None] * 3


def test_coordinator_and_parallel_collectors_default_config_is_their_section_of_the_run_config(tmp_path):
    # DI-engine: cls.default_config() -> the class's own config; ours is its section of the run config
    from parallel_rl.config import compile_config, default_config
    from parallel_rl.worker import (
        BaseParallelCollector,
        Coordinator,
        MarineParallelCollector,
        ZerglingParallelCollector,
    )

    run = default_config()
    assert Coordinator.default_config() == run.parallel.coordinator and "heartbeat_ttl" in Coordinator.default_config()
    for cls in (BaseParallelCollector, ZerglingParallelCollector, MarineParallelCollector):
        assert cls.default_config() == run.parallel.collector and "chunk_size" in cls.default_config()
    changed = Coordinator.default_config()
    changed.heartbeat_ttl = 1.0  # a copy: the next caller gets the defaults again
    assert Coordinator.default_config().heartbeat_ttl == run.parallel.coordinator.heartbeat_ttl
    cfg = compile_config({"parallel": {"coordinator": Coordinator.default_config()}})
    assert cfg.parallel.coordinator == run.parallel.coordinator
