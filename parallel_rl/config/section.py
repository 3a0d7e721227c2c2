"""Typed config sections, the config twin of :func:`parallel_rl.protocol.fields.wire`: a section is a frozen
dataclass of :func:`setting` fields, each with its default, its bounds (``lo``/``hi`` inclusive, ``above``/``below``
exclusive) or ``choices``, and its documentation. The section's check is derived from its fields; a relation
between two fields of one section is checked by the section's own :meth:`Section.check_relations`.

The compiled config stays a nested EasyDict (what the components read); a section is where its defaults, bounds,
docs and checks come from (:meth:`Section.defaults`, :meth:`Section.check`, the generated reference
``docs/configuration.md``). Torch-free and import-light: every component's section file imports only this.
"""

from __future__ import annotations

import copy
import dataclasses
import math
from typing import Any, ClassVar, Dict, Iterator, Mapping, Optional, Self, Sequence, Tuple, Type

from easydict import EasyDict

from ..errors import ConfigError


def setting(
    default: Any,
    *,
    lo: Optional[float] = None,
    hi: Optional[float] = None,
    above: Optional[float] = None,
    below: Optional[float] = None,
    choices: Optional[Sequence[Any]] = None,
    doc: str = "",
    nullable: bool = False,
) -> Any:
    """A section's field: its ``default`` (a :class:`Section` subclass: a section inside this one), its range (``lo <= value <= hi``, ``above < value < below``; None: no
    bound), or its ``choices``, and its ``doc`` (one or two sentences, as the reference prints it). ``nullable``:
    None is a value of its own (it says what it means in ``doc``), never checked against the range. A dict
    default is *open* when empty (any keys below it), as the schema's merge reads it."""
    meta = {
        "lo": lo,
        "hi": hi,
        "above": above,
        "below": below,
        "choices": tuple(choices) if choices else None,
        "doc": " ".join(doc.split()),
        "nullable": nullable,
    }
    if isinstance(default, type) and issubclass(default, Section):  # a section inside this one
        return dataclasses.field(default_factory=default.defaults, metadata={**meta, "section": default})
    if isinstance(default, (dict, list)):
        return dataclasses.field(default_factory=lambda: copy.deepcopy(default), metadata=meta)
    return dataclasses.field(default=default, metadata=meta)


def bounded(f: dataclasses.Field) -> bool:
    """Whether field ``f`` has a range or choices (what the reference and the field-walking test count)."""
    return any(f.metadata.get(key) is not None for key in ("lo", "hi", "above", "below", "choices"))


def describe(f: dataclasses.Field) -> str:
    """The values field ``f`` takes, in words: ``>= 1``, ``in (0, 1]``, ``one of 'exp', 'linear'``, ``''``."""
    m = f.metadata
    if m.get("choices") is not None:
        return "one of " + ", ".join(repr(c) for c in m["choices"])
    low = ("[", m["lo"]) if m.get("lo") is not None else ("(", m["above"]) if m.get("above") is not None else None
    high = ("]", m["hi"]) if m.get("hi") is not None else (")", m["below"]) if m.get("below") is not None else None
    if low and high:  # two-sided: an interval
        return f"in {low[0]}{low[1]!r}, {high[1]!r}{high[0]}" + (", or None" if m.get("nullable") else "")
    lower = f"{'>=' if low[0] == '[' else '>'} {low[1]!r}" if low else ""
    upper = f"{'<=' if high[0] == ']' else '<'} {high[1]!r}" if high else ""
    words = " and ".join(filter(None, [lower, upper]))
    if words and m.get("nullable"):
        words += ", or None"
    return words


def _in_range(m: Mapping[str, Any], value: Any) -> bool:
    if m.get("choices") is not None:
        return value in m["choices"]
    if isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(value):
        return False
    return (
        (m.get("lo") is None or value >= m["lo"])
        and (m.get("hi") is None or value <= m["hi"])
        and (m.get("above") is None or value > m["above"])
        and (m.get("below") is None or value < m["below"])
    )


@dataclasses.dataclass(frozen=True)
class Section:
    """A section of the config: subclasses are frozen dataclasses of :func:`setting` fields. ``path`` is where
    the section sits in the config tree (``parallel.worker``); ``title`` heads it in the reference."""

    path: ClassVar[str] = ""
    title: ClassVar[str] = ""

    @classmethod
    def fields(cls) -> Iterator[dataclasses.Field]:
        """The section's settings, in their declared order."""
        return iter(dataclasses.fields(cls))

    @classmethod
    def defaults(cls) -> EasyDict:
        """The section's defaults, a fresh tree each call (a caller's change does not reach the next one)."""
        return EasyDict(
            {
                f.name: (f.default_factory() if f.default is dataclasses.MISSING else f.default)
                for f in dataclasses.fields(cls)
            }
        )

    @classmethod
    def of(cls, values: Mapping[str, Any]) -> Self:
        """This section's ``values`` (a compiled config's, or a default's) as a frozen instance: what a component
        receives instead of the tree. A key ``values`` lacks takes its default, a key it has beyond the fields is
        left out, and a section inside this one is an instance of its own."""
        defaults = cls.defaults()
        kwargs = {}
        for f in dataclasses.fields(cls):
            value = values[f.name] if f.name in values else defaults[f.name]
            inner = f.metadata.get("section")
            kwargs[f.name] = inner.of(value) if inner is not None and isinstance(value, Mapping) else value
        return cls(**kwargs)

    @classmethod
    def read(cls, cfg: Mapping[str, Any], path: Optional[str] = None) -> Self:
        """This section of the compiled config ``cfg`` (at ``path``, else the section's own), as :meth:`of` makes
        it: ``LearnerSection.read(cfg).prefetch_batches``."""
        values: Mapping[str, Any] = cfg
        for key in filter(None, (cls.path if path is None else path).split(".")):
            values = values[key]
        return cls.of(values)

    @classmethod
    def check(cls, values: Mapping[str, Any], path: Optional[str] = None) -> None:
        """ConfigError naming the first key of ``values`` (this section's values in a compiled config, at ``path``)
        outside its range or choices, then the section's relations between its fields."""
        path = cls.path if path is None else path
        for f in dataclasses.fields(cls):
            value = values.get(f.name)
            if f.metadata.get("section") is not None and isinstance(value, Mapping):
                f.metadata["section"].check(value, f"{path}.{f.name}")
            cls.check_setting(f.name, value, f"{path}.{f.name}")
        cls.check_relations(values, path)

    @classmethod
    def check_setting(cls, name: str, value: Any, key: str) -> None:
        """ConfigError when ``value`` of field ``name`` is outside its range or choices, naming it as ``key`` (the
        dotted key the user wrote: DI-engine's name where the edge translated one, parallel_rl.compat.keys)."""
        f = next(f for f in dataclasses.fields(cls) if f.name == name)
        if not bounded(f) or (value is None and f.metadata.get("nullable")):
            return
        if not _in_range(f.metadata, value):
            parent, _, leaf = key.rpartition(".")
            raise ConfigError(f"{parent} needs {leaf} {describe(f)}, got {key}={value!r}")

    @classmethod
    def check_relations(cls, values: Mapping[str, Any], path: str) -> None:
        """The checks between this section's fields (none here): ConfigError naming the keys and values."""

    @classmethod
    def walk(cls, path: Optional[str] = None) -> Iterator[Tuple[str, Type["Section"]]]:
        """``(path, section)`` of this section and of each section inside it, depth first."""
        path = cls.path if path is None else path
        yield path, cls
        for f in dataclasses.fields(cls):
            if f.metadata.get("section") is not None:
                yield from f.metadata["section"].walk(f"{path}.{f.name}")

    @classmethod
    def reference(cls) -> Dict[str, Dict[str, Any]]:
        """Each key's default, values (:func:`describe`) and doc, as the generated reference prints them."""
        defaults = cls.defaults()
        return {
            f.name: {"default": defaults[f.name], "values": describe(f), "doc": f.metadata.get("doc", "")}
            for f in dataclasses.fields(cls)
            if f.metadata.get("section") is None
        }
