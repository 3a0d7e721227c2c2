"""Fuzzing the command line (issue #41): ``parallel_rl.cli.main`` in-process with argument lists drawn from the
real parser's sub-commands and options (read from it: a new option is fuzzed without a line here) and random
values. Whatever comes in, argparse refuses it (exit 2) or the command ends with an exit code and a one-line
error; never an uncaught exception. Only commands that fail fast: every config given is not one (a missing or
damaged file), every coordinator refuses connections, and the roles that serve (collector, learner, their ranks, the
service) are left out."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest
from hypothesis import HealthCheck, event, example, given, settings
from hypothesis import strategies as st

from parallel_rl.cli import build_parser, main

# the roles that serve and wait for a coordinator (a collector retries its registration for 60 s), and the service
# (`serve --dir D` serves until stopped)
SERVING = {"collector", "learner", "learner-rank", "serve"}
REFUSED = "http://127.0.0.1:1"  # nothing listens on port 1: a client's call fails at once
CONFIG = str(Path(__file__).resolve().parent.parent / "configs" / "cartpole_dqn.py")


def commands(parser: argparse.ArgumentParser, prefix=()) -> dict:
    """Each sub-command's words -> its options ``(flags, takes a value, required)`` and positionals, read from the
    parser."""
    out = {}
    for action in parser._actions:  # argparse keeps its sub-parsers here: the parser's own structure, not ours
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                words = prefix + (name,)
                options = [
                    (a.option_strings, a.nargs != 0, a.required)
                    for a in sub._actions
                    if a.option_strings and not isinstance(a, argparse._HelpAction)
                ]
                positionals = [
                    a.dest
                    for a in sub._actions
                    if not a.option_strings and not isinstance(a, argparse._SubParsersAction)
                ]
                out[words] = (options, positionals)
                out.update(commands(sub, words))
    return out


COMMANDS = {words: spec for words, spec in commands(build_parser()).items() if words[0] not in SERVING}
VALUES = st.one_of(
    st.text(max_size=20),
    st.integers().map(str),
    st.floats().map(str),
    st.sampled_from(
        [
            "",
            "-1",
            "0",
            "65536",
            "99999999999999999999",
            "nan",
            "inf",
            "http://[::1:1",
            "http://127.0.0.1:99999",
            REFUSED,
            "a=b",
            "env.stop_value=1e999",
            "x.y=[[[[",
            "policy=",
            "../../etc/passwd",
            "/dev/null",
            "/",
            "missing.py",
            "x" * 5000,
            "json",
            "onnx",
            "torchscript",
            "collector",
            "running",
            "--json",
            "-c",
        ]
    ),
)


@st.composite
def argv(draw):
    words = draw(st.sampled_from(sorted(COMMANDS)))
    options, positionals = COMMANDS[words]
    args = list(words)
    required = [o for o in options if o[2] and draw(st.integers(0, 9)) > 0]  # mostly given: a deeper run
    for flags, takes_value, _ in required + (draw(st.lists(st.sampled_from(options), max_size=5)) if options else []):
        args.append(draw(st.sampled_from(flags)))
        if takes_value:
            flag = args[-1]
            if flag in ("-c", "--config"):  # not a config (a missing file, a directory, a damaged one); eval and
                # export also get a real one (they find no checkpoint here and stop)
                bad = ["missing.py", "/", "damaged.py", "damaged.json", "damaged.yaml"]
                args.append(draw(st.sampled_from(bad + ([CONFIG] if words[0] in ("eval", "export") else []))))
            elif flag == "--coordinator":
                args.append(draw(st.sampled_from([REFUSED, "http://[::1:1", "127.0.0.1:1", "ftp://x", ""])))
            else:
                args.append(draw(VALUES))
    args += [draw(VALUES) for _ in positionals if draw(st.booleans())]
    if draw(st.integers(0, 4)) == 0:
        args += draw(st.lists(VALUES, min_size=1, max_size=2))  # words nobody asked for
    if words[0] in ("status", "tasks", "collectors") and "--coordinator" not in args:
        args += ["--coordinator", REFUSED]
    return args


@pytest.fixture
def workdir(tmp_path, monkeypatch):
    """A directory of its own (whatever a command writes lands there) with damaged configs, no cluster token, and
    a coordinator URL that refuses connections."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PARALLEL_RL_COORDINATOR", REFUSED)
    monkeypatch.delenv("PARALLEL_RL_TOKEN", raising=False)
    (tmp_path / "damaged.py").write_text("config = dict(env=dict(stop_value=)\n")
    (tmp_path / "damaged.json").write_text('{"env": [')
    (tmp_path / "damaged.yaml").write_text("env: [\n")
    return tmp_path


@settings(suppress_health_check=[HealthCheck.function_scoped_fixture], deadline=None)
@given(args=argv())
# the long profile's finding: a NUL in --token-file's path was a ValueError traceback
@example(args=["collectors", "add", "--token-file", "\x00", "--coordinator", "http://127.0.0.1:1"])
def test_fuzz_the_command_line_exits_2_or_with_one_line(workdir, capsys, args):
    try:
        code = main(args)
    except SystemExit as exc:  # argparse: 2 for a bad argument list, 0 for --help
        code = exc.code
        assert code in (0, 2), (args, code)
        event(f"{args[0]}: argparse {code}")
        capsys.readouterr()
        return
    err = capsys.readouterr().err
    event(f"{args[0]}: exit {code}")
    assert isinstance(code, int) and code != 0 or args[0] in ("status", "tasks", "collectors"), (args, code, err)
    if code:
        lines = [line for line in err.splitlines() if line.startswith("parallel-rl ")]
        assert len(lines) == 1 and "Traceback" not in err, (args, err)
