"""Name -> class registries so users plug in their own parts by name."""

from __future__ import annotations

import difflib
import importlib
from typing import Any, Callable, Dict, Iterable

from .errors import ConfigError


class Registry:
    """A named table of classes; ``build(name, ...)`` instantiates one."""

    def __init__(self, kind: str):
        self.kind = kind
        self._items: Dict[str, Any] = {}

    def register(self, name: str, obj: Any = None) -> Callable:
        def _do(o: Any) -> Any:
            if name in self._items and self._items[name] is not o:
                raise ConfigError(f"{self.kind} {name!r} is already registered to {self._items[name]!r}")
            self._items[name] = o
            return o

        return _do(obj) if obj is not None else _do

    def get(self, name: str) -> Any:
        try:
            return self._items[name]
        except KeyError:
            close = difflib.get_close_matches(str(name), list(self._items), n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise ConfigError(
                f"unknown {self.kind} type {name!r}{hint} (known: {', '.join(sorted(self._items))})"
            ) from None

    def build(self, name: str, *args: Any, **kwargs: Any) -> Any:
        return self.get(name)(*args, **kwargs)

    def __contains__(self, name: str) -> bool:
        return name in self._items

    def names(self) -> list:
        return sorted(self._items)


def import_modules(names: Iterable[str], key: str = "import_names") -> None:
    """Import user modules that register things on import (a config's ``import_names``)."""
    for name in names or []:
        try:
            importlib.import_module(name)
        except ImportError as exc:
            raise ConfigError(f"{key}: cannot import {name!r}: {exc}") from exc
