"""The typed config sections (parallel_rl/config/section.py): every bounded field of every section refuses a value
just outside its range (and a wrong choice) through compile_config, naming the key and the value; the generated
configuration reference is current."""
import dataclasses
import re
import subprocess
import sys

import pytest

from parallel_rl.config import compile_config
from parallel_rl.config.assembly import sections
from parallel_rl.config.section import Section, bounded, setting
from parallel_rl.errors import ConfigError


def just_outside(f: dataclasses.Field) -> list:
    """Values just outside field ``f``'s range, one per bound it has (a wrong choice for a choice field)."""
    m, whole = f.metadata, isinstance(f.default, int) and not isinstance(f.default, bool)
    step = 1 if whole else 0.5
    if m["choices"] is not None:
        return ["not-" + "-".join(map(str, m["choices"]))]
    out = []
    if m["lo"] is not None:
        out.append(m["lo"] - step)
    if m["above"] is not None:
        out.append(m["above"])
    if m["hi"] is not None:
        out.append(m["hi"] + step)
    if m["below"] is not None:
        out.append(m["below"])
    return out


def nested(path: str, key: str, value) -> dict:
    """``{"a": {"b": {key: value}}}`` for the dotted ``path`` "a.b"."""
    tree = {key: value}
    for part in reversed(path.split(".")):
        tree = {part: tree}
    return tree


CASES = [pytest.param(section, f.name, value, id=f"{section.path}.{f.name}={value!r}")
         for section in sections() for f in section.fields() if bounded(f) for value in just_outside(f)]


def test_the_walk_covers_every_section_and_bounded_key():
    # a walk over nothing passes: the sections and their bounded keys are there to walk
    walked = {(case.values[0].path, case.values[1]) for case in CASES}
    assert len(walked) >= 50
    assert {"parallel.worker", "parallel.coordinator", "parallel.commander", "parallel.learner", "system",
            "serial"} <= {path for path, _ in walked}


@pytest.mark.parametrize("section, key, value", CASES)
def test_every_value_just_outside_its_range_is_a_config_error_naming_key_and_value(section, key, value):
    with pytest.raises(ConfigError, match=re.escape(f"{section.path}.{key}={value!r}")):
        compile_config(nested(section.path, key, value))


def test_a_section_checks_its_fields_and_relations_in_isolation():
    @dataclasses.dataclass(frozen=True)
    class Toy(Section):
        path = "toy"
        rate: float = setting(0.5, above=0, hi=1, doc="a rate")
        mode: str = setting("a", choices=("a", "b"), doc="a mode")
        limit: int = setting(None, lo=1, nullable=True, doc="None: no limit")

    assert Toy.defaults() == {"rate": 0.5, "mode": "a", "limit": None}
    Toy.check({"rate": 1, "mode": "b", "limit": None})
    for values, match in [({"rate": 0, "mode": "a", "limit": None}, r"toy needs rate in \(0, 1\], got toy.rate=0"),
                          ({"rate": 0.5, "mode": "c", "limit": None}, r"toy needs mode one of 'a', 'b', got toy.mode='c'"),
                          ({"rate": 0.5, "mode": "a", "limit": 0}, r"toy needs limit >= 1, or None, got toy.limit=0"),
                          ({"rate": float("nan"), "mode": "a", "limit": 1}, r"toy.rate=nan"),
                          ({"rate": True, "mode": "a", "limit": 1}, r"toy.rate=True")]:
        with pytest.raises(ConfigError, match=match):
            Toy.check(values)


def test_the_configuration_reference_is_current():
    # docs/configuration.md is generated from the fields: a field added, bounded or documented differently fails
    # this until `python -m parallel_rl.config.reference` is run again
    done = subprocess.run([sys.executable, "-m", "parallel_rl.config.reference", "--check"], capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr
