"""The kit's modules import one way: no import cycle, layers in order, the CLI and its handlers on top.

Function-local imports count as edges too (they keep start-up small, but must not hide a cycle), and
so do the CLI's ``lazy("<module>", ...)`` handlers. The simulator's own package (k3sim, run inside the
sim image) is not part of the graph.
"""
from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# folder -> the name its modules go by: the kit's package, and the live suite (conformance/, which pytest
# collects and nothing imports; it stands in the conformance layer)
PACKAGES = {"k3lab": "k3lab", "conformance": "conformance"}
# bottom to top: a module may import its own layer and the layers below it, never one above
LAYERS = ["k3lab.settings", "k3lab.errors", "k3lab.paths", "k3lab.outputs", "k3lab.formats", "k3lab.waits", "k3lab.model", "k3lab.render", "k3lab.preflight", "k3lab.launch",
          "k3lab.conform", "k3lab.diagnosis", "k3lab.reports", "k3lab.tools", "k3lab.cli"]


def _modules() -> dict[str, Path]:
    mods = {}
    for folder, pkg in PACKAGES.items():
        for f in (ROOT / folder).rglob("*.py"):
            if "rootfs" in f.parts or "k3sim" in f.parts:  # the simulator's own package runs in its image
                continue
            rel = f.relative_to(ROOT / folder).with_suffix("")
            parts = rel.parts[:-1] if rel.name == "__init__" else rel.parts
            mods[".".join((pkg, *parts))] = f
    return mods


def layer(module: str) -> int:
    """Index in LAYERS of the layer ``module`` belongs to (k3lab itself, the package root, is -1)."""
    if module.startswith("conformance."):  # the suite: the conformance layer, beside its library k3lab.conform
        module = "k3lab.conform." + module
    for i, name in reversed(list(enumerate(LAYERS))):
        if module == name or module.startswith(name + "."):
            return i
    return -1


def _imports(name: str, path: Path, mods: dict[str, Path]) -> set[str]:
    """Kit modules that ``name`` imports anywhere in its file (module level or inside functions)."""
    text = path.read_text()
    package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    found = set()
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package[:len(package) - node.level + 1] + ([node.module] if node.module else []))
            found.add(base)
            found.update(f"{base}.{a.name}" for a in node.names)
    if name == "k3lab.cli.main":
        found.update(re.findall(r'lazy\("([\w.]+)"', text))
    out = set()
    for m in found:
        while m and m not in mods:
            m = m.rpartition(".")[0]
        if m and m != name:
            out.add(m)
    return out


def _graph() -> dict[str, set[str]]:
    mods = _modules()
    return {name: _imports(name, path, mods) for name, path in mods.items()}


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_graph_is_read():
    graph = _graph()
    assert {"k3lab.cli.main", "k3lab.launch.lifecycle", "k3lab.cli.commands", "k3lab.conform.plugin"} <= set(graph)
    assert "k3lab.launch.lifecycle" in graph["k3lab.cli.commands"]
    assert "k3lab.cli.commands" in graph["k3lab.cli.main"]  # through lazy(...)


def test_import_graph_has_no_cycle():
    assert _cycles(_graph()) == []


def test_cli_and_its_handlers_are_on_top():
    graph = _graph()
    on_top = {"k3lab.cli.main", "k3lab.cli.commands"}
    wrong = sorted((m, t) for m, targets in graph.items() for t in targets & on_top
                   if not (m == "k3lab.cli.main" and t == "k3lab.cli.commands"))
    assert wrong == [], f"modules below the CLI import it: {wrong}"


def test_cycle_detector_sees_a_cycle():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_every_lazy_handler_resolves():
    """Each subcommand's ``lazy("<module>", "<function>")`` names a function that exists."""
    import importlib

    text = (ROOT / "k3lab" / "cli" / "main.py").read_text()
    handlers = re.findall(r'lazy\("([\w.]+)", "(\w+)"\)', text)
    assert len(handlers) >= 10
    missing = [(m, f) for m, f in handlers if not callable(getattr(importlib.import_module(m), f, None))]
    assert missing == []


def test_layers_import_downwards_only():
    graph = _graph()
    assert all(layer(m) >= 0 or m == "k3lab" for m in graph), [m for m in graph if layer(m) < 0]
    upward = sorted(f"{m} -> {t}" for m, targets in graph.items() for t in targets if layer(t) > layer(m))
    assert upward == [], "imports from a lower layer into a higher one:\n" + "\n".join(upward)


def test_kit_modules_are_imported_by_package_name_only():
    """``launchers/`` and ``conformance/`` are folders of the checkout that hold no kit module (the suite is
    collected by pytest, the simulator runs in its image): nothing imports them by a top-level name."""
    bad = []
    for path in [*_modules().values(), *(ROOT / "tests").rglob("*.py"), *(ROOT / "contracts").rglob("*.py")]:
        for node in ast.walk(ast.parse(path.read_text())):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import) else
                     [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level else [])
            bad += [f"{path.relative_to(ROOT)}: {n}" for n in names if n.split(".")[0] in ("launchers", "conformance")]
    assert bad == []
