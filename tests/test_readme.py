"""The README and the docs pages as executable documentation (issue 40, "make it stay fixed"): every shell block in
README.md and docs/**/*.md is run through a real shell, in a temporary directory holding a copy of `configs/`, and
checked against what the text beside it promises. The README is the front page (issue 42 item 9: a tour and links);
the reference material it held (the CLI synopsis, the REST API, after training, ...) is in docs/, and its blocks
are run there.

Convention: an HTML comment right before a fenced block says how the block is tested (readers of the rendered
page, on GitHub or the docs site, do not see it). Every ```sh / ```bash / ```console block must have one (pages in
UNMARKED_PAGES aside); a block of another language is tested when it has one. One directive a line::

    <!-- readme-test
    skip: REASON                  not run here (installs, Docker, a cluster, GPUs, long benchmarks): reported skipped
    check: synopsis               a command synopsis: every option and choice a `parallel-rl SUB` line names is in
                                  `parallel-rl SUB --help`, and every option of that command's usage is in the line
    slow                          a long one (pytest -m "not slow" leaves it out)
    timeout: S                    the deadline of each step below (default 120 s)
    env: KEY=VALUE                in the environment of every command below
    before: COMMAND               run first (must exit 0): makes what the block reads, e.g. a run with a small budget
    background: COMMAND           started before the block, stopped (SIGTERM, then SIGKILL) after it
    wait: REGEX                   the last background command printed REGEX; its named groups become {NAME}
    replace: OLD => NEW           in the block, OLD becomes NEW ({NAME} filled in), e.g. localhost:PORT => ...
    exit: N                       the block's exit status (default 0; sh blocks run with `set -e -o pipefail`)
    expect: REGEX                 the block printed a line matching REGEX (re.M)
    creates: GLOB                 the block made a file matching GLOB (relative to its directory)
    -->

Commands find `parallel-rl` and `python` of the interpreter running the tests first on PATH, and import the
checkout the tests run from.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support import eventually

ROOT = Path(__file__).resolve().parents[1]
SHELL_LANGUAGES = {"sh", "bash", "console"}
FENCE = re.compile(r"^```(?P<lang>[\w-]*)[ \t]*\n(?P<body>.*?)^```[ \t]*$", re.M | re.S)
MARKER = re.compile(r"<!--\s*readme-test\b(?P<directives>(?:(?!-->).)*)-->\s*\Z", re.S)
HEADING = re.compile(r"^#+ +(.+)$", re.M)
KEYS = {
    "skip",
    "check",
    "slow",
    "timeout",
    "env",
    "before",
    "background",
    "wait",
    "replace",
    "exit",
    "expect",
    "creates",
}
# the pages whose shell blocks are documentation of another kind (installs, long benchmarks, other hosts), not yet
# marked; their marked blocks, if any, still run
UNMARKED_PAGES = {"docs/deploy.md", "docs/benchmarks.md"}


@dataclass
class Block:
    section: str
    lang: str
    body: str
    line: int
    directives: list | None  # (key, value) in order; None: no marker
    name: str = ""
    page: str = "README.md"

    @property
    def where(self) -> str:
        return f"{self.page} line {self.line}"

    def values(self, key: str) -> list:
        return [value for k, value in self.directives or [] if k == key]

    def value(self, key: str, default=None):
        found = self.values(key)
        return found[-1] if found else default


def parse_directives(text: str, where: str) -> list:
    directives = []
    for raw in text.strip().splitlines():
        line = raw.strip()
        if not line:
            continue
        key, _, value = line.partition(":")
        key = key.strip()
        if key not in KEYS:
            raise AssertionError(
                f"{where}: unknown readme-test directive {key!r} in {raw!r}; use one of {sorted(KEYS)}"
            )
        directives.append((key, value.strip()))
    return directives


def readme_blocks(path: Path = ROOT / "README.md") -> list:
    """The fenced blocks of one page, each with the heading it is under (headings inside blocks, such as a shell
    comment, are not headings) and its marker's directives."""
    text = path.read_text()
    page = str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else path.name
    fences = list(FENCE.finditer(text))
    outside = FENCE.sub(lambda m: re.sub(r"[^\n]", " ", m.group(0)), text)  # every block blanked, offsets kept
    blocks, counts = [], {}
    for match in fences:
        line = text.count("\n", 0, match.start()) + 1
        before = text[: match.start()]
        headings = HEADING.findall(outside[: match.start()])
        section = headings[-1] if headings else "top"
        marker = MARKER.search(before[-3000:])
        directives = parse_directives(marker.group("directives"), f"{page} line {line}") if marker else None
        block = Block(section, match.group("lang"), match.group("body"), line, directives, page=page)
        slug = re.sub(r"[^a-z0-9]+", "-", section.lower()).strip("-")
        if page != "README.md":
            slug = f"{path.stem}-{slug}"
        counts[slug] = counts.get(slug, 0) + 1
        block.name = f"{slug}-{counts[slug]}"
        blocks.append(block)
    return blocks


PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
BLOCKS = [block for page in PAGES for block in readme_blocks(page)]
TESTED = [b for b in BLOCKS if b.directives is not None]


def test_every_shell_block_says_how_it_is_tested():
    """A shell block without a marker would go untested without anyone noticing."""
    unmarked = [
        f"{b.where} ({b.section})"
        for b in BLOCKS
        if b.lang in SHELL_LANGUAGES and b.directives is None and b.page not in UNMARKED_PAGES
    ]
    assert not unmarked, (
        f"shell blocks without a `<!-- readme-test ... -->` marker: {unmarked}; "
        f"see tests/test_readme.py for the directives"
    )
    assert [b for b in TESTED if not b.value("skip") and b.page == "README.md"], "no README block runs"
    assert [b for b in TESTED if b.value("check") == "synopsis"], "no page holds the CLI synopsis (check: synopsis)"


def test_the_readme_is_a_front_page():
    """Issue 42 item 9: the README is what the project is, the two commands, a tour and links (<= 25 KB); every
    page it links to is there, with the heading a link names (GitHub's heading ids)."""
    readme = (ROOT / "README.md").read_text()
    assert len(readme.encode()) <= 25_000, (
        f"README.md is {len(readme.encode())} bytes: move reference material "
        f"to a docs/ page and link it (25,000 at most)"
    )
    for target in re.findall(r"\]\(((?:docs/)[^)#\s]+)(?:#([^)\s]+))?\)", readme):
        path, anchor = ROOT / target[0], target[1]
        assert path.is_file(), f"README.md links to {target[0]}, which does not exist"
        if anchor and path.suffix == ".md":
            ids = {github_heading_id(h) for h in HEADING.findall(FENCE.sub("", path.read_text()))}
            assert anchor in ids, f"README.md links to {target[0]}#{anchor}: no such heading there"
    assert "](docs/" in readme


def github_heading_id(heading: str) -> str:
    """The id GitHub (and mkdocs.yml's slugify) gives a heading: lower case, punctuation dropped, spaces to -."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def _param(block: Block):
    marks = [pytest.mark.slow] if any(k == "slow" for k, _ in block.directives) else []
    return pytest.param(block, id=block.name, marks=marks)


@pytest.fixture
def workdir(tmp_path):
    """What a reader has after cloning: the configs, in a directory of the test's own."""
    work = tmp_path / "work"
    shutil.copytree(ROOT / "configs", work / "configs", ignore=shutil.ignore_patterns("__pycache__"))
    return work


def shell_env(block: Block) -> dict:
    bin_dir = os.path.dirname(sys.executable)
    assert shutil.which("parallel-rl", path=bin_dir), (
        f"no parallel-rl script beside {sys.executable}: install the project into that environment (make test does)"
    )
    env = {
        **os.environ,
        "PATH": bin_dir + os.pathsep + os.environ.get("PATH", ""),
        "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
    }
    for item in block.values("env"):
        key, _, value = item.partition("=")
        env[key.strip()] = value.strip()
    return env


class Shell:
    """A command through a real shell, in a session of its own (its whole process group can be ended), its output
    in a file."""

    def __init__(self, command: str, cwd: Path, env: dict, log: Path, lang: str = "sh"):
        self.command, self.log = command, log
        self._out = open(log, "w")
        argv = [sys.executable, "-c", command] if lang == "python" else ["bash", "-e", "-o", "pipefail", "-c", command]
        self.proc = subprocess.Popen(
            argv,
            cwd=cwd,
            env=env,
            stdout=self._out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )

    def output(self) -> str:
        return self.log.read_text()

    def wait(self, timeout: float) -> int:
        """Its exit status; whatever it left running in its process group is ended with it."""
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(
                f"`{self.command}` still running after {timeout} s:\n{self.output()[-3000:]}"
            ) from None
        finally:
            self.kill()

    def stop(self, timeout: float) -> None:
        """SIGTERM (as a user's `kill`), then SIGKILL of its process group past ``timeout``."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                pass
        self.kill()

    def kill(self) -> None:
        """SIGKILL to its process group (its session's: nothing else is in it)."""
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait(10)
        self._out.close()


def run_block(block: Block, work: Path) -> None:
    env = shell_env(block)
    timeout = float(block.value("timeout", 120))
    logs = work.parent
    for n, command in enumerate(block.values("before")):
        before = Shell(command, work, env, logs / f"before-{n}.log")
        code = before.wait(timeout)
        assert code == 0, f"before: `{command}` exited {code}:\n{before.output()[-3000:]}"
    groups: dict = {}
    background: list = []
    try:
        for key, value in block.directives:
            if key == "background":
                background.append(Shell("exec " + value, work, env, logs / f"background-{len(background)}.log"))
            elif key == "wait":
                assert background, f"{block.where}: `wait:` before any `background:`"
                job = background[-1]

                def printed(job=job, pattern=value):
                    if job.proc.poll() is not None:
                        raise AssertionError(
                            f"`{job.command}` exited ({job.proc.returncode}) before printing "
                            f"{pattern!r}:\n{job.output()[-3000:]}"
                        )
                    return re.search(pattern, job.output(), re.M)

                groups.update(eventually(printed, timeout=timeout, interval=0.05, message=value).groupdict())
        body = block.body
        for item in block.values("replace"):
            old, _, new = item.partition("=>")
            assert old.strip() in body, f"{block.where}: `replace:` names {old.strip()!r}, not in it"
            body = body.replace(old.strip(), new.strip().format(**groups))
        shell = Shell(body, work, env, logs / "block.log", lang=block.lang)
        code = shell.wait(timeout)
        output = shell.output()
        expected = int(block.value("exit", 0))
        assert code == expected, f"{block.where} exited {code}, not {expected}:\n{body}\n---\n{output[-3000:]}"
        for pattern in block.values("expect"):
            assert re.search(pattern, output, re.M), (
                f"{block.where}: no line matching {pattern!r} in its output:\n{output[-3000:]}"
            )
        for pattern in block.values("creates"):
            assert list(work.glob(pattern)), f"{block.where} made no {pattern} in {work}: {sorted(os.listdir(work))}"
    finally:
        for job in reversed(background):
            job.stop(timeout=60)


def check_synopsis(block: Block, work: Path) -> None:
    """Every option, choice and action a `parallel-rl SUB ...` line of the synopsis names is in `SUB --help`, and
    every option `SUB --help`'s usage shows is in the line."""
    env = shell_env(block)
    lines = []
    for raw in block.body.splitlines():
        text = raw.split("#", 1)[0].rstrip()
        if raw[:1].isspace() and lines:
            lines[-1] += " " + text.strip()
        elif text.strip():
            lines.append(text.strip())
    assert lines and all(line.startswith("parallel-rl ") for line in lines), lines
    problems = []
    for line in lines:
        sub = line.split()[1]
        help_run = subprocess.run(
            ["parallel-rl", sub, "--help"], cwd=work, env=env, capture_output=True, text=True, timeout=60
        )
        if help_run.returncode != 0:
            problems.append(f"`parallel-rl {sub} --help` exited {help_run.returncode}: {help_run.stderr.strip()}")
            continue
        named = set(re.findall(r"(?<![\w-])(--?[A-Za-z][\w-]*)", line))
        named |= {
            word
            for choices in re.findall(r"(?<![\w.])([a-z_]+(?:\|[a-z_]+)+)(?![\w.])", line)
            for word in choices.split("|")
        }
        named |= {
            alt.split()[0]
            for group in re.findall(r"\[([^][]*\|[^][]*)\]", line)
            for alt in group.split("|")
            if alt.split() and alt.split()[0].islower()
        }
        for word in sorted(named):
            if not re.search(rf"(?<![\w-]){re.escape(word)}(?![\w-])", help_run.stdout):
                problems.append(f"`{line}`: `parallel-rl {sub} --help` has no {word}")
        # and the other way round: the synopsis is the reference, every option of the command's usage is in it
        usage = help_run.stdout.split("\n\n", 1)[0]
        for option in sorted(set(re.findall(r"(?<![\w-])(--?[A-Za-z][\w-]*)", usage)) - {"-h"} - named):
            problems.append(f"`{line}`: the CLI has {option} (see `parallel-rl {sub} --help`); add it to the synopsis")
    assert not problems, "the command synopsis (%s) disagrees with the CLI:\n%s" % (block.where, "\n".join(problems))


@pytest.mark.timeout(900)  # a block's steps each have their own deadline (`timeout:`)
@pytest.mark.parametrize("block", [_param(b) for b in TESTED])
def test_readme_block_does_what_the_text_says(block, workdir):
    if block.value("skip"):
        pytest.skip(f"{block.where}: {block.value('skip')}")
    if block.value("check") == "synopsis":
        check_synopsis(block, workdir)
    else:
        assert block.value("check") is None, f"{block.where}: unknown check {block.value('check')!r}"
        run_block(block, workdir)


def test_the_marker_convention_is_parsed_as_documented(tmp_path):
    """The parser itself, on a README of its own: markers bind to the next block only, unmarked shell blocks are
    found, an unknown directive is an error naming it."""
    readme = tmp_path / "README.md"
    readme.write_text(
        "## A\n\n<!-- readme-test\nslow\nexpect: ^hi$\n-->\n```sh\necho hi\n```\n\n"
        "```sh\necho unmarked\n```\n\n```\ndiagram\n```\n"
    )
    first, second, third = readme_blocks(readme)
    assert first.directives == [("slow", ""), ("expect", "^hi$")] and first.name == "a-1"
    assert second.directives is None and second.lang == "sh"
    assert third.directives is None and third.lang == ""
    page = tmp_path / "page.md"  # a shell comment in a block is no heading: the next block is still under "B"
    page.write_text("# Page\n\n## B\n\n```sh\n# not a heading\n```\n\ntext\n\n```sh\ntrue\n```\n")
    assert [b.section for b in readme_blocks(page)] == ["B", "B"]
    assert [b.name for b in readme_blocks(page)] == ["page-b-1", "page-b-2"]
    readme.write_text("<!-- readme-test\nexpct: x\n-->\n```sh\ntrue\n```\n")
    with pytest.raises(AssertionError, match="unknown readme-test directive 'expct'"):
        readme_blocks(readme)
