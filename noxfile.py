"""Sessions: one per scenario (up, conformance, down), plus render, golden, preflight, tests, k8sapi, bench, lint,
docs, lock and tests_latest.

Every session installs with ``requirements/ci.lock`` as constraints (the versions the kit is tested and
released with: the same verdict from the same inputs next month); ``tests_latest`` installs without it, the
newest versions ``pyproject.toml`` allows, so an upgrade is a deliberate ``nox -s lock -- --upgrade``.

Arguments after ``--`` pass through: to ``k3lab up`` for scenario sessions (e.g. ``-- --keep``),
to pytest for ``tests``/``golden``/``faults``.
"""
from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import nox

nox.options.default_venv_backend = "venv"
nox.options.reuse_existing_virtualenvs = True
nox.options.sessions = ["tests"]

SCENARIOS = ["a3_pd", "a3_pd_1m", "a3_pd_pooled", "a5_pd", "a5_pd_1m", "a5_pd_pooled", "k3_a3_mixed",
             "k3_a3_mixed_1m", "k3_a3_mixed_toolcall", "k3_a3_mixed_perf", "k3_a3_pd", "k3_a2_mixed"]


MAX_COMPLEXITY = 15  # per function (radon's cyclomatic complexity), in nox -s lint


LOCK = "requirements/ci.lock"  # pinned from PyPI for Python 3.11 (nox -s lock regenerates it)
# what the lock is compiled from: the kit's dependencies with these extras, and the CI tools
LOCK_EXTRAS = ("sim", "test", "docs", "k8s")
LOCK_TOOLS = "requirements/tools.in"
LINT_TOOLS = ("ruff", "mypy", "types-PyYAML", "types-requests", "types-paramiko", "radon")


def install(session: nox.Session, *packages: str, extras: str = "sim,test,k8s") -> None:
    """The kit (editable, with ``extras``) and ``packages``, every version as the lock pins it."""
    session.install("-c", LOCK, "-e", f".[{extras}]", *packages)


def _command_session(doc: str, *command: str):
    """A session that installs the kit and runs one command, the arguments after ``--`` appended."""
    def run(session: nox.Session) -> None:
        install(session)
        session.run(*command, *session.posargs)

    run.__doc__ = doc
    return run


for _sid in SCENARIOS:
    nox.session(name=_sid)(_command_session(
        f"Bring {_sid} up (sim unless --inventory), run the conformance suite, tear down.", "k3lab", "cycle", _sid))

# the one-command sessions: name, what it does (nox -l), the command
for _name, _doc, _command in [
    ("release", "Release gate: static stage for all twelve scenarios, live cycles on the sim (2 at a time), one verdict.",
     ["k3lab", "release", "--out", "build/release"]),
    ("golden", "Compare every rendered artefact with golden/ (add -- --snapshot-update to accept changes).",
     ["pytest", "tests/unit/render/test_golden.py"]),
    ("bench", "Benchmarks, written as JSON to build/bench.json.", ["k3lab", "bench", "--out", "build/bench.json"]),
    ("faults", "The fault matrix: every catalogued fault caught by exactly its intended checks (static + live).",
     ["k3lab", "faults", "--out", "build/faults.json"]),
]:
    nox.session(name=_name)(_command_session(_doc, *_command))


@nox.session
def tests(session: nox.Session) -> None:
    """The kit's own tests: unit, golden, sim integration (needs Docker)."""
    install(session)
    # fast tests on both cores; the integration tests share one Docker engine, so they run in order
    # coverage of the whole kit and of the processes the tests start (pyproject [tool.coverage], patch =
    # subprocess: each child writes its own data file, combined at the end); the integration run adds to the unit run's data
    cov = ["--cov", "--cov-report=term:skip-covered", "--cov-report=json:build/coverage.json"]
    session.run("pytest", "-n", "2", "--dist", "loadgroup", "--ignore=tests/integration", "--ignore=tests/k8sapi",
                *cov, *session.posargs)
    session.run("pytest", "tests/integration", *cov, "--cov-append", *session.posargs)


@nox.session
def render(session: nox.Session) -> None:
    """Render every scenario with the default inventory into build/render/."""
    install(session)
    for sid in SCENARIOS:
        session.run("k3lab", "render", sid, "--out", f"build/render/{sid}", silent=True)


@nox.session
def preflight(session: nox.Session) -> None:
    """Preflight every scenario with the default inventory and every example lab inventory."""
    install(session)
    for sid in SCENARIOS:
        session.run("k3lab", "preflight", sid)
        session.run("k3lab", "preflight", sid, "--inventory", f"fixtures/inventories/{sid}.yaml")


@nox.session
def contracts(session: nox.Session) -> None:
    """The stand-ins against the real components (MemCache 1.3.0, vLLM 0.33 wheel, vllm-ascend launcher);
    downloads are cached in ~/.cache/k3lab."""
    install(session, "regex")  # the vLLM kimi_k3 parsers' own regex engine
    session.run("pytest", "contracts", "-p", "no:cacheprovider", *session.posargs)


@nox.session
def k8sapi(session: nox.Session) -> None:
    """The k8s target's LeaderWorkerSets on a real Kubernetes API server: apiextensions-apiserver and etcd,
    built from Debian's packages by .ci/k8sapi-build on first use (cached in ~/.cache/k3lab/k8sapi)."""
    install(session)
    out = session.run("bash", ".ci/k8sapi-build", external=True, silent=True)
    lines = str(out).strip().splitlines()
    for line in lines[:-1]:  # what the build said besides its result (a pinned sid version gone, say)
        session.log(line)
    session.run("pytest", "tests/k8sapi", "-p", "no:cacheprovider", *session.posargs,
                env={"K3LAB_K8SAPI_BIN": lines[-1]})


@nox.session
def lint(session: nox.Session) -> None:
    """ruff (with bugbear and simplify) on everything, mypy on the kit's package k3lab (see pyproject), and
    radon: no function of the kit, the suite or the simulator above cyclomatic complexity MAX_COMPLEXITY."""
    install(session, *LINT_TOOLS)
    session.run("ruff", "check", "k3lab", "launchers", "conformance", "contracts", "tests", "noxfile.py", "conftest.py")
    session.run("mypy")
    report = session.run("radon", "cc", "--json", "k3lab", "conformance", "launchers/sim/k3sim", silent=True)
    over = sorted(too_complex(json.loads(str(report))))
    if over:
        session.error(f"cyclomatic complexity above {MAX_COMPLEXITY} (radon cc -s):\n" + "\n".join(over))


def too_complex(report: dict) -> set[str]:
    """Functions and methods (closures included) of a ``radon cc --json`` report above MAX_COMPLEXITY,
    and every file radon could not read (a file it cannot parse is not a pass)."""
    out: set[str] = set()
    for path, blocks in report.items():
        if not isinstance(blocks, list):
            out.add(f"{path}: radon could not read it: {blocks}")
            continue
        todo = list(blocks)
        while todo:
            block = todo.pop()
            todo += block.get("methods", []) + block.get("closures", [])
            if block.get("type") in ("function", "method") and block["complexity"] > MAX_COMPLEXITY:
                out.add(f"{path}:{block['lineno']} {block['name']} ({block['complexity']})")
    return out


@nox.session
def wheel(session: nox.Session) -> None:
    """The wheel on its own: build it, install it into a fresh venv, run k3lab cycle a3_pd_1m from another
    directory (no checkout on sys.path: the simulator, suite and fixtures must come from the wheel)."""
    tmp = Path(session.create_tmp()).resolve()
    dist = tmp / "dist"
    shutil.rmtree(dist, ignore_errors=True)
    session.run("python", "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(dist), ".")
    session.install("-c", str(Path(LOCK).resolve()), "--force-reinstall", f"{next(dist.glob('k3lab-*.whl'))}[sim]")
    work = tmp / "elsewhere"
    work.mkdir(exist_ok=True)
    session.chdir(work)
    session.run("python", "-c", "import k3lab, sys; assert 'site-packages' in k3lab.__file__, k3lab.__file__")
    session.run("k3lab", "cycle", "a3_pd_1m", *session.posargs)


@nox.session
def docs(session: nox.Session) -> None:
    """The documentation site (mkdocs.yml, docs/) into build/site, warnings as errors; then the tests that run
    or parse every command the README and the docs show (no Docker)."""
    install(session, extras="sim,test,docs,k8s")
    session.run("mkdocs", "build", "--strict", "--clean", "--site-dir", "build/site")
    session.run("pytest", "-q", "-p", "no:cacheprovider", "tests/unit/test_docs.py", "tests/unit/test_readme.py",
                "tests/unit/cli/test_newcomer.py", *session.posargs)


@nox.session
def lock(session: nox.Session) -> None:
    """Regenerate requirements/ci.lock from pyproject.toml and requirements/tools.in (Python 3.11, PyPI). Pins
    already in the lock are kept while they satisfy pyproject; ``-- --upgrade`` (or ``--upgrade-package NAME``)
    moves them to the newest, after nox -s tests_latest showed the newest pass."""
    session.install("uv")
    extras = [arg for extra in LOCK_EXTRAS for arg in ("--extra", extra)]
    session.run("uv", "pip", "compile", "pyproject.toml", LOCK_TOOLS, *extras, "--python-version", "3.11",
                "--python-platform", "x86_64-unknown-linux-gnu", "--index-url", "https://pypi.org/simple",
                "--no-emit-index-url", "-o", LOCK, *session.posargs)


@nox.session
def tests_latest(session: nox.Session) -> None:
    """The non-Docker tests on the newest versions pyproject.toml allows (no lock), and which of them are newer
    than the lock: what an upgrade of the lock would change. Arguments after ``--`` replace pytest's."""
    session.install("--upgrade", "--upgrade-strategy", "eager", "-e", ".[sim,test,k8s]")
    freeze = session.run("python", "-m", "pip", "freeze", "--exclude-editable", silent=True)
    newer = newer_than_lock(str(freeze), Path(LOCK).read_text())
    session.log("newer than requirements/ci.lock: " + (", ".join(newer) or "none"))
    session.run("pytest", "-p", "no:cacheprovider", *(session.posargs or ["-q", "-n", "2", "--dist", "loadgroup",
                                                                          "--ignore=tests/integration"]))


def _pins(text: str) -> dict[str, str]:
    """``name==version`` lines (pip freeze, a compiled lock) as {normalised name: version}."""
    out = {}
    for line in text.splitlines():
        name, sep, version = line.split("#")[0].strip().partition("==")
        if sep:
            out[re.sub(r"[-_.]+", "-", name).lower()] = version.strip()
    return out


def newer_than_lock(freeze: str, lock_text: str) -> list[str]:
    """``name lock -> installed`` for each installed distribution whose version differs from its pin."""
    locked = _pins(lock_text)
    return [f"{name} {locked[name]} -> {version}" for name, version in sorted(_pins(freeze).items())
            if name in locked and locked[name] != version]


@nox.session(name="lab_a3_pd_1m")
def lab_a3_pd_1m(session: nox.Session) -> None:
    """a3_pd_1m on an emulated 8-host lab (k3lab labemu, root): up, lab cycle over ssh:// and tcp://, always down."""
    install(session)
    inv = "build/labemu/a3_pd_1m.yaml"
    try:
        session.run("k3lab", "labemu", "up", "--scenario", "a3_pd_1m", "--out", inv)
        session.run("k3lab", "cycle", "a3_pd_1m", "-i", inv, *session.posargs)
    finally:
        session.run("k3lab", "labemu", "down")
