"""The configuration reference, generated from the typed sections' fields: every key with its default, the values
it takes and its doc. ``python -m parallel_rl.config.reference`` writes ``docs/configuration.md``
(``--check``: exit 1 when the file is not current); a test keeps the committed file current."""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from typing import Any, List

from .assembly import top_sections

HEADER = """# Configuration reference

Generated from the typed config sections (`python -m parallel_rl.config.reference`; do not edit by hand: a test
fails when this file is not current). Each section is a frozen dataclass of `setting()` fields
(`parallel_rl/config/section.py`), in the file of the component that reads it (`slave/defaults.py`,
`coordinator/defaults.py`, `envs/defaults.py`, `policy/defaults.py`, ...); `compile_config` refuses a value outside
the range or choices shown here with a `ConfigError` naming the key and the value
(`parallel.worker needs setup_timeout > 0, got parallel.worker.setup_timeout=0`), and a relation between two keys
of one section by that section's `check_relations`. A config file states only what differs from these defaults
(a test fails when a shipped config in `configs/` restates one).

Every section of the tree is typed. The replay buffer's section depends on its `type` (one table per type
below); a two-player game (`env.type='pettingzoo'`) has the two-player collector's and evaluator's sections and a
`league`.

An algorithm is one `PolicySpec` (`parallel_rl/policy/spec.py`: its name, its `"module:Class"`, its `policy`
section, the action spaces it trains on); `register_policy(PolicySpec(...))` adds your own, its section's fields
checked like the built-in ones (the older `register_policy(name, target, default_config, action_spaces)` still
works, with no bounds beyond the types).
"""

DEFAULT_PATH = os.path.join(os.path.dirname(__file__), os.pardir, os.pardir, "docs", "configuration.md")


def _cell(text: Any) -> str:
    """``text`` fit for a Markdown table cell: no pipes, no HTML tags, no Sphinx roles."""
    text = re.sub(r":(?:func|class|meth|mod|data):`~?([^`]+)`", r"`\1`", str(text))
    return text.replace("|", "\\|").replace("<", "&lt;").replace(">", "&gt;").replace("\n", " ")


def _default(value: Any) -> str:
    return "`" + _cell(json.dumps(value) if not isinstance(value, str) else repr(value)) + "`"


def _table(lines: List[str], path: str, section: Any, heading: str) -> None:
    lines += ["", f"## `{path}`{heading}: {section.title}", ""]
    if section.__doc__ and not section.__doc__.startswith(section.__name__ + "("):  # a dataclass's own repr
        lines += [_cell(" ".join(section.__doc__.split())), ""]
    lines += ["| key | default | values | meaning |", "|---|---|---|---|"]
    for key, row in section.reference().items():
        lines.append(f"| `{key}` | {_default(row['default'])} | {_cell(row['values'])} | {_cell(row['doc'])} |")


def _shared_sections() -> List[Any]:
    """Every section but the algorithms' own, in :func:`~.assembly.top_sections` order: the replay buffer's of
    every registered type (naive's first: its ``type`` names them all) where the default tree has one, the
    two-player collector's beside the collector's, and the league's."""
    from ..data.buffer import BUFFER_REGISTRY, buffer_section
    from ..policy.spec import policy_spec

    buffers: List[Any] = []
    for name in sorted(BUFFER_REGISTRY.names(), key=lambda name: name != "naive"):
        section = buffer_section(name)
        if section is not None and section not in buffers:
            buffers.append(section)
    single, battle = top_sections("dqn"), top_sections("dqn", battle=True)
    out: List[Any] = []
    for one, two in zip(single, battle):
        if one is policy_spec("dqn").typed:
            continue
        out += buffers if one in buffers else [one] if one is two else [one, two]
    return out + battle[len(single) :]


def render() -> str:
    """The reference as Markdown: one table per section, in :func:`~.assembly.top_sections` order, then each
    algorithm's ``policy`` section (its own keys, bounds and defaults)."""
    from ..policy.spec import POLICIES

    lines: List[str] = [HEADER.rstrip("\n")]
    for top in _shared_sections():
        for path, section in top.walk():
            _table(lines, path, section, "")
    for name, spec in POLICIES.items():
        for path, section in spec.typed.walk() if spec.typed else ():
            _table(lines, path, section, f" (policy.type={name!r})")
    return "\n".join(lines) + "\n"


def main(argv: List[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m parallel_rl.config.reference", description=__doc__)
    parser.add_argument("--out", default=os.path.normpath(DEFAULT_PATH), help="the file to write")
    parser.add_argument("--check", action="store_true", help="exit 1 when the file is not current; write nothing")
    args = parser.parse_args(argv)
    text = render()
    if args.check:
        current = open(args.out).read() if os.path.exists(args.out) else ""
        if current != text:
            print(f"{args.out} is not current: run python -m parallel_rl.config.reference", file=sys.stderr)
            return 1
        return 0
    with open(args.out, "w") as f:
        f.write(text)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
