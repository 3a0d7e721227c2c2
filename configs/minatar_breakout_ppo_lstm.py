"""Recurrent PPO (LSTM) on MinAtar Breakout, one frame at a time, serial pipeline:
``parallel-rl serial -c configs/minatar_breakout_ppo_lstm.py``.

Issue #29's "MinAtar game with frame stack 1": MinAtar's envs give one 10x10 board a step (bool, channels last,
``[10, 10, 4]`` for Breakout: paddle, ball, trail, bricks) and nothing stacks them (frame stacks here are ALE's
vector env's ``env_kwargs.stack_num``, see ``pong_dqn.py``; MinAtar has none), so this is frame stack 1 with no
new key. The trail channel (the ball's last position) still shows the ball's direction on one board; the LSTM
is what lets the policy remember further back.

Everything is ``minatar_breakout_ppo.py``'s (gymnax-blines' MinAtar PPO settings: 64 envs x 128 steps a
segment, 4 epochs of 1,024-row minibatches, gamma 0.999, ..., and its env semantics) except the network and the
sequences:
MinAtar's own network (Young & Tian 2019: one 16-filter 3x3 conv, then 128 units; ``encoder.type="minatar"``)
feeds an LSTM of 128 units (``model.recurrent``; an actor's and a critic's, sb3-contrib RecurrentPPO's default
``enable_critic_lstm=True``, as in ``cartpole_novel_ppo_lstm.py``), whose features the actor's and the critic's
layers read (the base's ``hidden_size_list`` [256, 256] and activation). Each lane's 128 rows of a segment are one
sequence (``unroll_len`` 128, the steps per env a segment: sb3-contrib's RecurrentPPO runs each env's whole
rollout, as ``cartpole_novel_ppo_lstm.py`` does with 32), so a 1,024-row minibatch is 8 sequences. The LSTM's
size (the width of MinAtar's own hidden layer) and the unroll length are our choices, not a published setting.
No learning run has been made with this file (a test runs it for a few hundred env steps).
"""

import copy
import os
import runpy

main_config = copy.deepcopy(
    runpy.run_path(os.path.join(os.path.dirname(__file__), "minatar_breakout_ppo.py"))["main_config"]
)
main_config["exp_name"] = "minatar_breakout_ppo_lstm"
main_config["policy"]["model"].update(
    encoder=dict(type="minatar", shape=[10, 10, 4]), recurrent=dict(type="lstm", hidden_size=128)
)
main_config["policy"]["learn"]["unroll_len"] = 128
