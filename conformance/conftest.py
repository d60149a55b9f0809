"""Fixtures for live checks: the run-state and plan of a deployment that is up, and node access.

Checks reach nodes only through real interfaces: ``docker exec`` of the node's tools in the node's
container on the node's own Docker endpoint (``k3lab.launch.endpoints.NodeHost``, testinfra-shaped),
HTTP endpoints and Prometheus text. Each node's checks share an xdist group so
``-n N --dist loadgroup`` runs nodes in parallel.
"""
from __future__ import annotations

import os
from pathlib import Path

import pytest
import requests

from k3lab import settings
from k3lab.model import apikey, runs
from k3lab.model.plan import Plan

pytest_plugins = ["k3lab.conform.plugin"]


def pytest_configure(config):
    """The suite's entry reads its settings from its environment (a bad value is a usage error naming the
    variable). The controller (or a run without xdist) makes the directory where workers share each
    node's tool batch (k3lab.conform.nodetools); workers inherit it through the environment."""
    _read_settings()
    if hasattr(config, "workerinput"):
        return
    import shutil
    import tempfile

    from k3lab.conform import nodetools

    config._k3lab_tools_dir = tempfile.mkdtemp(prefix="k3lab-node-tools-")
    os.environ[nodetools.DIR_ENV] = config._k3lab_tools_dir  # for the workers, child processes
    _read_settings()  # and for this process, which runs the checks without xdist
    config.add_cleanup(lambda: shutil.rmtree(config._k3lab_tools_dir, ignore_errors=True))


def _read_settings() -> None:
    try:
        settings.use(settings.load())
    except settings.SettingError as exc:
        raise pytest.UsageError(f"k3lab conformance: {exc}") from None


def _run_dir(config) -> Path:
    raw = config.getoption("--run-dir") or settings.current().run_dir
    if not raw:
        raise pytest.UsageError("conformance needs --run-dir RUN_DIR of a deployment that is up (k3lab up --keep)")
    return Path(raw)


def _plan(config) -> Plan:
    from k3lab.errors import InputError
    from k3lab.model import runs

    try:
        return runs.plan(_run_dir(config))
    except InputError as exc:  # one line naming the file and the field, not a pydantic traceback per test
        raise pytest.UsageError(str(exc)) from None


def pytest_generate_tests(metafunc):
    """Parametrize by node / API / engine from the plan, so each is its own test case."""
    if not metafunc.config.getoption("--run-dir") and not settings.current().run_dir:
        return
    plan = _plan(metafunc.config)
    if "node" in metafunc.fixturenames:
        metafunc.parametrize("node", [pytest.param(n, id=n.name, marks=pytest.mark.xdist_group(n.name))
                                      for n in plan.nodes])
    if "api" in metafunc.fixturenames:
        metafunc.parametrize("api", [pytest.param(a, id=f"{a.node}:{a.url.rsplit(':', 1)[1]}") for a in plan.expect.apis])
    if "engine" in metafunc.fixturenames:
        engines = [p for p in plan.processes() if p.kind == "engine"]
        metafunc.parametrize("engine", [pytest.param(e, id=e.id, marks=pytest.mark.xdist_group(e.node))
                                        for e in engines])


REACHABILITY = "test_cross_node_reachability"


def pytest_collection_modifyitems(config, items):
    """In the hardware stage the cross-node pings go last: a node's pings run one after another and a
    real -hccs_ping lasts a second or more (minutes per round on 8 nodes), so the cheap checks speak first."""
    if config.getoption("--hardware-stage"):
        items.sort(key=lambda item: getattr(item, "originalname", item.name) == REACHABILITY)


@pytest.fixture
def hardware_stage(request) -> int | None:
    """None in the suite; in the hardware stage, how many checks have failed so far (the stage stops at them)."""
    return request.session.testsfailed if request.config.getoption("--hardware-stage") else None


@pytest.fixture(scope="session")
def run_dir(pytestconfig) -> Path:
    return _run_dir(pytestconfig)


@pytest.fixture(scope="session")
def plan(pytestconfig) -> Plan:
    return _plan(pytestconfig)


@pytest.fixture(scope="session")
def state(run_dir) -> runs.RunState:
    return runs.run_state(run_dir)


@pytest.fixture(scope="session")
def client_pool(state):
    """One Docker client per endpoint for the whole session (one SSH connection per ssh:// host)."""
    from k3lab.launch.endpoints import ClientPool, SshOptions

    pool = ClientPool(SshOptions.from_dict(state.ssh))
    yield pool
    pool.close()


@pytest.fixture(scope="session")
def hosts(state, client_pool):
    """Per node: its container on its own endpoint from run-state.json (the same container name can
    exist on every lab node). ``hosts[n].run(cmd)`` returns rc/stdout/stderr like testinfra."""
    from k3lab.launch import targets
    from k3lab.launch.endpoints import hosts_from_state

    own = targets.get(state.target).hosts_from_state(state) if state.target else None  # k8s: pods, through its API
    return own if own is not None else hosts_from_state(state, client_pool)


@pytest.fixture(scope="session")
def tools(hosts, plan, request):
    """Per node: its read-only tool output (npu-smi, hccn_tool per device, /proc, staged files) from
    ONE docker exec per node for the whole suite (k3lab.conform.nodetools); other commands run live.
    A run of the NPU and HCCN checks alone (the hardware stage) reads only what they need."""
    from concurrent.futures import ThreadPoolExecutor

    from k3lab.conform.nodetools import NodeTools, Store, shared_dir
    from k3lab.launch.suite import HARDWARE

    store = Store(shared_dir(), hardware_only=all(item.path.name == HARDWARE for item in request.session.items))
    tools = {n.name: NodeTools(hosts[n.name], n, store) for n in plan.nodes if n.name in hosts}
    # every node's batch starts now, in the background: checks that need a node wait only for its own
    pool = ThreadPoolExecutor(max_workers=max(1, len(tools)))
    for t in tools.values():
        pool.submit(t.prefetch)
    yield tools
    pool.shutdown(wait=True, cancel_futures=True)


class _Clients(dict):
    """Per node its endpoint's client, built on first use: a host that does not answer fails its own
    node's checks (named, at once after the first), never every node's."""

    def __init__(self, state, pool) -> None:
        super().__init__()
        self.state, self.pool = state, pool

    def __missing__(self, node: str):
        from k3lab.launch.endpoints import LOCAL_ENDPOINT, describe, reason, unreachable_error

        endpoint = self.state.endpoint_of(node, LOCAL_ENDPOINT)
        try:
            return self.pool.get(endpoint)
        except Exception as exc:
            if not unreachable_error(exc):
                raise
            raise AssertionError(f"{node} ({describe(endpoint)}): endpoint {endpoint} does not answer: "
                                 f"{reason(exc)}") from None


@pytest.fixture(scope="session")
def docker_clients(state, client_pool):
    """Per node: the Docker client of that node's own endpoint."""
    return _Clients(state, client_pool)


@pytest.fixture(scope="session")
def containers(state):
    """Per node: its container(s) as the target describes them to the container checks (k8s: the pods,
    through its API); None: each node's container on its own Docker endpoint (test_containers.py reads it)."""
    from k3lab.launch import targets

    return targets.get(state.target).container_views(state) if state.target else None


@pytest.fixture(scope="session")
def http():
    session = requests.Session()
    session.trust_env = False  # the kit host's proxy variables never apply to the deployment's own addresses
    key = apikey.get()
    if key:
        session.headers["Authorization"] = f"Bearer {key}"
    return session


@pytest.fixture(scope="session")
def entrypoint(plan) -> str:
    return plan.expect.entrypoint




@pytest.fixture
def cold_cache(http, plan):
    """``cold_cache()`` resets every prefix cache (through the proxy on PD); False with the reason
    when the engines refuse (no VLLM_SERVER_DEV_MODE=1): use a never-seen prompt then."""
    from k3lab.conform.cache import reset_prefix_cache

    def reset(external: bool = False) -> tuple[bool, str]:
        return reset_prefix_cache(http, plan, external)
    return reset
