"""Dependencies say what the code uses, both ways.

What the kit imports at run time is a runtime dependency, not only a test extra: ``k3lab cycle`` runs the
conformance suite with pytest and xdist, and with those in the ``test`` extra only a plain ``pip install .``
brought a deployment up and then failed with 'No module named pytest'. Distributions that come with a
declared one (pydantic-core with pydantic) are allowed. And every runtime dependency is imported by the kit
(or used by option); the ``sim`` extra is what the simulator's image needs beyond them.
"""
from __future__ import annotations

import ast
import re
import sys
import tomllib
from importlib.metadata import packages_distributions
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
KIT = ("k3lab", "conformance")  # the package and the live suite
INTERNAL = set(KIT) | {"k3sim"}  # the simulator's package, run in its image (launchers/sim/k3sim)
# pinned by the declared distribution that installs it
TRANSITIVE = {"pydantic-core": "pydantic"}
# used by option, not by import: the suite runs as 'pytest -n 2 --dist loadgroup'
BY_OPTION = {"pytest-xdist"}
# the k8s extra: the official client, imported by the one module that talks to the API server, with its own
# transport (urllib3, a dependency of the client) whose errors that module names
K8S_MODULE = "k3lab/launch/targets/k8sapi.py"


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _names(requirements: list[str]) -> set[str]:
    return {_norm(re.split(r"[<>=!~\[ ;]", d, maxsplit=1)[0]) for d in requirements}


def _project() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def _runtime_dependencies() -> set[str]:
    return _names(_project()["dependencies"])


def _imported_distributions() -> dict[str, str]:
    """Distribution -> one kit file that imports it (the simulator's own package runs in its image)."""
    dists = packages_distributions()
    out: dict[str, str] = {}
    for pkg in KIT:
        for f in sorted((ROOT / pkg).rglob("*.py")):
            for node in ast.walk(ast.parse(f.read_text())):
                if isinstance(node, ast.Import):
                    names = [a.name for a in node.names]
                elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
                    names = [node.module]
                else:
                    continue
                for name in names:
                    top = name.split(".")[0]
                    if top in sys.stdlib_module_names or top in INTERNAL:
                        continue
                    for dist in dists.get(top, [top]):
                        out.setdefault(_norm(dist), str(f.relative_to(ROOT)))
    return out


def test_what_the_kit_imports_is_a_runtime_dependency():
    deps = _runtime_dependencies()
    k8s = _names(_project()["optional-dependencies"]["k8s"]) | {"urllib3"}
    missing = {d: where for d, where in _imported_distributions().items()
               if d not in deps and TRANSITIVE.get(d) not in deps and not (d in k8s and where == K8S_MODULE)}
    assert missing == {}, f"imported by the kit but not in [project] dependencies: {missing}"


def test_only_the_k8s_client_module_imports_the_k8s_extra():
    """The kit loads without the k8s extra: the client is imported by one module, which only the k8s target
    imports, and only when a run needs the cluster."""
    imports = _imported_distributions()
    assert imports.get("kubernetes") == K8S_MODULE
    assert imports.get("urllib3", K8S_MODULE) == K8S_MODULE


def test_the_suite_runner_is_a_runtime_dependency():
    assert {"pytest"} | BY_OPTION <= _runtime_dependencies()


def test_every_runtime_dependency_is_used():
    """A declared distribution nothing imports (msgpack was one) is weight on every install."""
    used = set(_imported_distributions()) | BY_OPTION
    unused = sorted(_runtime_dependencies() - used)
    assert unused == [], f"declared in [project] dependencies but imported by no kit module: {unused}"


def test_the_sim_extra_is_what_the_image_needs_beyond_the_kit():
    """The real vllm-ascend proxy runs in the sim image on the kit's interpreter; its own imports
    (fastapi, uvicorn) are the ``sim`` extra, checked before an image is built."""
    from k3lab.launch.simimage import image

    sim = _names(_project()["optional-dependencies"]["sim"])
    assert sim == {_norm(n) for n in image.SIM_EXTRA}
    assert not sim & _runtime_dependencies()


def test_a_missing_sim_extra_is_an_environment_error(monkeypatch):
    import importlib.util

    import pytest

    from k3lab.errors import EnvError
    from k3lab.launch.simimage import image

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "uvicorn" else real(name, *a))
    with pytest.raises(EnvError, match=r"\[sim\] extra \(uvicorn not installed.*pip install 'k3lab\[sim\]'"):
        image.build_tar()
