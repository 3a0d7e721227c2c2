"""Atari Pong DQN, serial pipeline: ``parallel-rl serial -c configs/pong_dqn.py``.

Env: ALE's own vector env (ale-py's ``AtariVectorEnv``, through ``ALE/Pong-v5``'s vector entry point) with the
standard DQN preprocessing as config (``env.env_kwargs``, ALE's C++ implementation, nothing hand-written):
frame skip 4 (max over the last two frames), 84x84 grey, a stack of 4, up to 30 no-op actions at reset,
FIRE at reset, episodic life (``life_loss_info``: a lost life is ``terminated`` for the learner, the game goes
on; EnvManager ends episodes with the game) and rewards clipped to [-1, 1] for training only; evaluators'
envs (``env.eval_env_kwargs``) play whole games with raw rewards, so evaluations report whole-game returns.
No sticky actions (``repeat_action_probability=0``, as the NoFrameskip-v4 ids the DQN papers used).

Algorithm: tianshou's ``examples/atari/atari_dqn.py`` (a maintained Atari DQN whose Pong curve reaches ~20):
the Nature CNN (Mnih et al. 2015: ``encoder.type="nature"``, a 512-unit layer, linear Q head), Adam 1e-4,
gamma 0.99, 3-step targets, target network copied every 500 updates, batch 32, a replay of 100k
transitions, epsilon 1.0 -> 0.05 over the first 1M env steps, one update per 10 env steps, 20k random steps
first. Differences: tianshou does not clip gradients either, and starts from a random policy for 20k
steps as here. Not measured on this box (a Nature-CNN update takes ~63 ms on one CPU thread): Atari scores
need the GPU; ``configs/pong_dqn_parallel.py`` runs it as a cluster. Memory: the serial replay and the cluster's
chunks keep each frame once (``parallel_rl.data.frames``): ~1.1 GB of frames for the 100k transitions, not the
5.6 GB of obs and next_obs stacks.
"""

main_config = dict(
    exp_name="pong_dqn",
    env=dict(
        env_id="ALE/Pong-v5",
        import_names=["ale_py"],
        collector_env_num=10,
        evaluator_env_num=4,
        n_evaluator_episode=4,
        stop_value=20,
        # ale_py.vector_env.AtariVectorEnv's own preprocessing
        env_kwargs=dict(
            frameskip=4,
            img_height=84,
            img_width=84,
            grayscale=True,
            stack_num=4,
            noop_max=30,
            use_fire_reset=True,
            repeat_action_probability=0.0,
            life_loss_info=True,
            reward_clipping=True,
        ),
        eval_env_kwargs=dict(life_loss_info=False, reward_clipping=False),
    ),
    policy=dict(
        type="dqn",
        model=dict(hidden_size_list=[], dueling=False, encoder=dict(type="nature", shape=[4, 84, 84])),
        random_collect_size=20_000,
        learn=dict(
            update_per_collect=1,
            batch_size=32,
            learning_rate=1e-4,
            target_update_freq=500,
            double=False,
            max_grad_norm=0.0,
        ),
        # 10 envs x 1 step, one update: 0.1 update per env step
        collect=dict(n_sample=10),
        eval=dict(evaluator=dict(eval_freq=50_000)),
        other=dict(
            eps=dict(type="linear", start=1.0, decay=1_000_000),
            replay_buffer=dict(type="naive", replay_buffer_size=100_000),
        ),
    ),
    serial=dict(max_env_step=10_000_000),
)
