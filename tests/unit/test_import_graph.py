"""The kit's modules import one way: no import cycle, the CLI and its command handlers on top.

Function-local imports count as edges too (they keep start-up small, but must not hide a cycle), and
so do the CLI's ``lazy("<module>", ...)`` handlers. The simulator's own package (k3sim, run inside the
sim image) is not part of the graph.
"""
from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("launchers", "conformance")


def _modules() -> dict[str, Path]:
    mods = {}
    for pkg in PACKAGES:
        for f in (ROOT / pkg).rglob("*.py"):
            if "rootfs" in f.parts:
                continue
            rel = f.relative_to(ROOT).with_suffix("")
            parts = rel.parts[:-1] if rel.name == "__init__" else rel.parts
            mods[".".join(parts)] = f
    return mods


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
    if name == "launchers.cli":
        found.update(f"launchers.{m}" for m in re.findall(r'lazy\("(\w+)"', text))
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
    assert {"launchers.cli", "launchers.lifecycle", "launchers.commands", "conformance.plugin"} <= set(graph)
    assert "launchers.lifecycle" in graph["launchers.commands"]
    assert "launchers.commands" in graph["launchers.cli"]  # through lazy(...)


def test_import_graph_has_no_cycle():
    assert _cycles(_graph()) == []


def test_cli_and_its_handlers_are_on_top():
    graph = _graph()
    on_top = {"launchers.cli", "launchers.commands"}
    wrong = sorted((m, t) for m, targets in graph.items() for t in targets & on_top
                   if not (m == "launchers.cli" and t == "launchers.commands"))
    assert wrong == [], f"modules below the CLI import it: {wrong}"


def test_cycle_detector_sees_a_cycle():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_every_lazy_handler_resolves():
    """Each subcommand's ``lazy("<module>", "<function>")`` names a function that exists."""
    import importlib

    text = (ROOT / "launchers" / "cli.py").read_text()
    handlers = re.findall(r'lazy\("(\w+)", "(\w+)"\)', text)
    assert len(handlers) >= 10
    missing = [(m, f) for m, f in handlers if not callable(getattr(importlib.import_module(f"launchers.{m}"), f, None))]
    assert missing == []
