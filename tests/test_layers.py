"""The floor plan, checked: no import circle among the modules of parallel_rl and coordinator_app, no import
from a lower layer to a higher one (LAYERS, below), and the size bars of #22: no module over MAX_MODULE_LINES
lines, no class over MAX_CLASS_METHODS methods.

Every import counts: at a module's top, inside a function (a lazy import is a dependency all the same) and under
``TYPE_CHECKING`` (so is a type). Modules are read with ``ast``, never imported; relative imports are resolved.
``from package import name`` depends on the module ``package.name`` when there is one, else on the package.
"""

from __future__ import annotations

import ast
import io
import tokenize
from collections import deque
from pathlib import Path
from typing import Dict, Iterable, List, Sequence, Set, Tuple

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("parallel_rl", "coordinator_app")

# Top to bottom (docs: /work/shared/DESIGN.md "Growing the house"). A room is a package or module of parallel_rl
# (``parallel_rl.slave.link`` is in room ``slave``; the root ``parallel_rl`` holds __version__), or
# coordinator_app; a module of a package can be a room of its own where LAYERS names it (``config.schema``, the
# ground floor of the config package, whose assembly is on a top floor). A room imports its own layer and the
# layers below it, never one above.
LAYERS: Tuple[Tuple[str, ...], ...] = (
    ("cli", "__main__"),
    # after: the after-training commands (eval, plot, export) and the notebook API; lab: sweep and tune
    ("commands", "after", "lab", "service.commands"),  # service.commands: serve, runs (the service's CLI)
    ("service",),  # the runs API and the pool: several trainings on one pool of workers (#44)
    # other libraries' names: DI-engine's parallel_rl.worker and comm, tianshou's and torchrl's collectors
    ("worker", "compat"),
    ("config",),  # the assembly of every component's defaults (config.assembly), the launcher's included
    ("entry",),  # the serial pipeline, the launcher of `parallel-rl run`, its fork server
    ("coordinator_app",),  # REST views
    ("coordinator",),
    ("collector", "learner", "evaluator"),  # the wings: each role's logic beside its process shell
    ("slave",),  # what every worker process is: its HTTP app, inbox/outbox, link to the coordinator
    ("policy", "data", "envs", "league"),
    ("protocol",),  # typed messages
    (
        "storage",
        "runtime",
        "progress",
        "registry",
        "tblog",
        "config.schema",
        "config.section",
        "compat.keys",
    ),  # config.schema: merge, coerce, validate; config.section: the typed section every component declares;
    # compat.keys: DI-engine's config keys translated at the edge (compile_config calls it first)
    ("transport",),  # HTTP server, client, codec: on errors alone
    ("errors", "parallel_rl"),
)

# Circles known today, each fixed by a step of #22 in flight: remove an entry when its fix is merged (the test
# fails while an entry names a circle that no longer exists). A new circle is never added here: break it.
KNOWN_CIRCLES: List[Set[str]] = []

# Imports from a lower layer to a higher one known today (importer, imported), each to go with a step of #22;
# the same rules as KNOWN_CIRCLES.
KNOWN_UPWARD: Set[Tuple[str, str]] = {
    # a slave compiles the config the coordinator sends it: the defaults of every component (config.assembly)
    ("parallel_rl.slave.slave", "parallel_rl.config"),
    # the notebook API (#28): parallel_rl.train / parallel_rl.load_policy, a lazy facade (PEP 562 __getattr__) on
    # the package, which otherwise holds __version__ only; the facade is what the issue asks for
    ("parallel_rl", "parallel_rl.after.api"),
}


# the size bars (#22): past them a module or class holds more than one thing; split it along a seam. A module's
# lines are counted as written before any wrapping: a statement (a call, a literal) the formatter wraps over
# several lines counts as one, so `ruff format` (make lint) does not move the bar; comments, docstrings and
# blank lines count as before
MAX_MODULE_LINES = 500
MAX_CLASS_METHODS = 25  # functions defined directly in the class body (properties and class methods included)


def find_modules(root: Path, packages: Iterable[str]) -> Dict[str, Tuple[Path, bool]]:
    """Dotted module name -> (file, whether it is a package's __init__)."""
    found = {}
    for package in packages:
        for path in sorted((root / package).rglob("*.py")):
            parts = list(path.relative_to(root).with_suffix("").parts)
            is_package = parts[-1] == "__init__"
            found[".".join(parts[:-1] if is_package else parts)] = (path, is_package)
    return found


def _imported_names(node: ast.AST, base: str) -> List[str]:
    """The dotted names an import statement in a module of package ``base`` reaches, finest first."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    if isinstance(node, ast.ImportFrom):
        if node.level:
            parts = base.split(".")
            package = ".".join(parts[: len(parts) - node.level + 1] + ([node.module] if node.module else []))
        else:
            package = node.module or ""
        return [f"{package}.{alias.name}" for alias in node.names]
    return []


def import_graph(root: Path, packages: Iterable[str]) -> Dict[str, Dict[str, int]]:
    """Module -> {module it imports: the line of the first such import}, for our modules only."""
    modules = find_modules(root, packages)
    graph: Dict[str, Dict[str, int]] = {}
    for name, (path, is_package) in modules.items():
        base = name if is_package else name.rpartition(".")[0]
        edges = graph.setdefault(name, {})
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            for target in _imported_names(node, base):
                while target and target not in modules:  # a name in a module, or a module of another project
                    target = target.rpartition(".")[0]
                if target and target != name:
                    edges.setdefault(target, node.lineno)
    return graph


def circles(graph: Dict[str, Dict[str, int]]) -> List[Set[str]]:
    """The strongly connected parts of more than one module (Tarjan's algorithm)."""
    index: Dict[str, int] = {}
    low: Dict[str, int] = {}
    stack: List[str] = []
    found: List[Set[str]] = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        for other in graph.get(module, {}):
            if other not in index:
                visit(other)
                low[module] = min(low[module], low[other])
            elif other in stack:
                low[module] = min(low[module], index[other])
        if low[module] == index[module]:
            part = {stack.pop()}
            while module not in part:
                part.add(stack.pop())
            if len(part) > 1:
                found.append(part)

    for module in sorted(graph):
        if module not in index:
            visit(module)
    return found


def a_cycle(graph: Dict[str, Dict[str, int]], part: Set[str]) -> str:
    """One cycle through ``part``, written out with the line of each import (for the failure message)."""
    start = min(part)
    came_from = {start: None}
    queue = deque([start])
    while queue:
        module = queue.popleft()
        for other, line in sorted(graph[module].items()):
            if other == start:
                path = [(module, line)]
                while came_from[path[-1][0]] is not None:
                    path.append(came_from[path[-1][0]])
                steps = [f"{m} (line {ln})" for m, ln in reversed(path)]
                return " -> ".join(steps + [start])
            if other in part and other not in came_from:
                came_from[other] = (module, line)
                queue.append(other)
    return ", ".join(sorted(part))


def room(module: str) -> str:
    parts = module.split(".")
    if parts[0] == "parallel_rl":
        if ".".join(parts[1:3]) in layer_of(LAYERS):  # a module that is a room of its own
            return ".".join(parts[1:3])
        return parts[1] if len(parts) > 1 else "parallel_rl"
    return parts[0]


def layer_of(layers: Sequence[Tuple[str, ...]]) -> Dict[str, int]:
    """Room -> its layer's depth (0: the top)."""
    return {name: depth for depth, rooms in enumerate(layers) for name in rooms}


def upward_imports(graph: Dict[str, Dict[str, int]], layers: Sequence[Tuple[str, ...]]) -> Set[Tuple[str, str]]:
    depth = layer_of(layers)
    return {
        (module, other)
        for module, edges in graph.items()
        for other in edges
        if depth[room(other)] < depth[room(module)]
    }


def unwrapped_lines(text: str) -> int:
    """Physical lines, less those that only continue a statement begun on an earlier line inside brackets."""
    continued, depth, start = set(), 0, None
    for token in tokenize.generate_tokens(io.StringIO(text).readline):
        if token.type in (tokenize.NEWLINE, tokenize.ENDMARKER):
            start = None
            continue
        if token.type in (tokenize.NL, tokenize.COMMENT, tokenize.INDENT, tokenize.DEDENT):
            continue
        if start is None:
            start = token.start[0]
        elif depth > 0 and token.start[0] > start:
            continued.add(token.start[0])
        if token.type == tokenize.OP and token.string in "([{":
            depth += 1
        elif token.type == tokenize.OP and token.string in ")]}":
            depth -= 1
    return len(text.splitlines()) - len(continued)


def oversized(root: Path, packages: Iterable[str]) -> List[str]:
    """Modules over MAX_MODULE_LINES lines and classes over MAX_CLASS_METHODS methods, each said with its size."""
    found = []
    for name, (path, _) in sorted(find_modules(root, packages).items()):
        text = path.read_text()
        lines = unwrapped_lines(text)
        if lines > MAX_MODULE_LINES:
            found.append(f"module {name}: {lines} lines")
        for node in ast.walk(ast.parse(text, str(path))):
            if isinstance(node, ast.ClassDef):
                methods = sum(isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) for n in node.body)
                if methods > MAX_CLASS_METHODS:
                    found.append(f"class {name}.{node.name} (line {node.lineno}): {methods} methods")
    return found


@pytest.fixture(scope="module")
def graph() -> Dict[str, Dict[str, int]]:
    return import_graph(ROOT, PACKAGES)


def test_every_room_has_a_layer(graph):
    rooms = {room(module) for module in graph}
    placed = set(layer_of(LAYERS))
    assert rooms - placed == set(), "a new package or module: place it in LAYERS in tests/test_layers.py"
    # protocol: being written (#22 item 2)
    assert placed - rooms <= {"protocol"}, "LAYERS names a room that no longer exists: remove it"


def test_no_import_circle(graph):
    found = circles(graph)
    new = [part for part in found if part not in KNOWN_CIRCLES]
    assert not new, "import circles (break each: move what both sides need below them):\n" + "\n".join(
        a_cycle(graph, part) for part in new
    )
    gone = [part for part in KNOWN_CIRCLES if part not in found]
    assert not gone, f"these circles are gone: remove them from KNOWN_CIRCLES in tests/test_layers.py: {gone}"


def test_no_import_from_a_lower_layer_to_a_higher_one(graph):
    found = upward_imports(graph, LAYERS)
    new = sorted(found - KNOWN_UPWARD)
    assert not new, (
        "imports from a lower layer to a higher one (LAYERS in tests/test_layers.py; move the "
        "imported code down, or the importer up):\n"
        + "\n".join(f"{module} (line {graph[module][other]}) -> {other}" for module, other in new)
    )
    gone = sorted(KNOWN_UPWARD - found)
    assert not gone, f"these imports are gone: remove them from KNOWN_UPWARD in tests/test_layers.py: {gone}"


def test_no_module_or_class_over_the_size_bars():
    found = oversized(ROOT, PACKAGES)
    assert not found, (
        f"over the bars of #22 ({MAX_MODULE_LINES} lines a module, {MAX_CLASS_METHODS} methods a "
        "class): split each along a seam (a cohesive piece into a module or part of its own):\n" + "\n".join(found)
    )


def test_the_size_check_finds_long_modules_and_classes_with_many_methods(tmp_path):
    package = tmp_path / "parallel_rl"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "long.py").write_text("x = 1\n" * (MAX_MODULE_LINES + 1))
    (package / "fits.py").write_text("x = 1\n" * MAX_MODULE_LINES)
    # a call wrapped over many lines is one line of the bar: the formatter's wrapping does not count
    (package / "wrapped.py").write_text("x = 1\n" * (MAX_MODULE_LINES - 1) + "y = f(\n" + "    1,\n" * 50 + ")\n")
    methods = "".join(f"    def m{i}(self):\n        pass\n" for i in range(MAX_CLASS_METHODS))
    (package / "wide.py").write_text(
        f"class Fits:\n{methods}\nclass Wide:\n{methods}    async def more(self):\n"
        "        pass\n\n    def nested(self):\n        def inner():\n"
        "            pass\n"
    )
    assert oversized(tmp_path, ["parallel_rl"]) == [
        f"module parallel_rl.long: {MAX_MODULE_LINES + 1} lines",
        f"class parallel_rl.wide.Wide (line {MAX_CLASS_METHODS * 2 + 3}): {MAX_CLASS_METHODS + 2} methods",
    ]


def test_the_check_finds_circles_lazy_imports_and_upward_imports(tmp_path):
    package = tmp_path / "parallel_rl"
    (package / "low").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "low" / "__init__.py").write_text("from .a import A\n")
    (package / "low" / "a.py").write_text("A = 1\n\ndef f():\n    from ..high import H\n    return H\n")
    (package / "high.py").write_text("from .low import a\nfrom . import low\nH = 2\n")
    graph = import_graph(tmp_path, ["parallel_rl"])
    assert graph["parallel_rl.high"] == {"parallel_rl.low.a": 1, "parallel_rl.low": 2}
    assert circles(graph) == [{"parallel_rl.high", "parallel_rl.low", "parallel_rl.low.a"}]
    assert a_cycle(graph, circles(graph)[0]) == (
        "parallel_rl.high (line 1) -> parallel_rl.low.a (line 4) -> parallel_rl.high"
    )
    layers = (("high",), ("low",), ("parallel_rl",))
    assert upward_imports(graph, layers) == {("parallel_rl.low.a", "parallel_rl.high")}
