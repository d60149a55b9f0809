"""The k8s target's launch path (#34 item 2) through the real ``kubernetes`` client, against the HTTP-level
STAND-IN API server of tests/unit/launch/k8s_apiserver.py (not Kubernetes: no scheduler, kubelet or
containers; pod readiness is set by the test). Pod exec is faked at the ``kubernetes.stream.stream``
boundary: the command runs on the test host. The readiness gates' own probes (HTTP to the nodes) are
replaced by a recorder: no engine runs here. Everything else (the lifecycle, the run scope, the client's
requests, label selectors, strict validation of the LeaderWorkerSets against the real CRD schema) is the kit's.
"""
from __future__ import annotations

import json

import pytest
import yaml

pytest.importorskip("kubernetes")

from k3lab import settings  # noqa: E402
from k3lab.cli import main as cli  # noqa: E402
from k3lab.errors import RunInterrupted  # noqa: E402
from k3lab.launch import lifecycle  # noqa: E402
from k3lab.launch.scope import RunScope  # noqa: E402
from k3lab.launch.targets import k8sapi  # noqa: E402
from k3lab.launch.targets.base import Removed  # noqa: E402
from k3lab.launch.targets.k8s import K8sTarget, PodsNotReady  # noqa: E402
from k3lab.launch.targets.sim import SimTarget  # noqa: E402
from k3lab.model import runs  # noqa: E402
from tests.unit.launch.k8s_apiserver import StandinApiServer, fake_stream  # noqa: E402
from tests.unit.render.test_k8s import k8s_inventory  # noqa: E402

SCENARIO = "k3_a3_mixed"  # one LeaderWorkerSet of four pods and the ConfigMap


@pytest.fixture
def cluster(tmp_path, monkeypatch):
    with StandinApiServer() as api:
        config = api.kubeconfig(tmp_path / "kubeconfig")
        execs: list[tuple[str, list[str]]] = []
        monkeypatch.setattr(k8sapi, "stream", fake_stream(api, execs))
        api.execs = execs  # type: ignore[attr-defined]
        with settings.patched(kubeconfig=config, runs=tmp_path / "runs", teardown_deadline_s=5.0):
            yield api


@pytest.fixture
def inventory(tmp_path):
    path = tmp_path / "k8s.yaml"
    path.write_text(yaml.safe_dump(k8s_inventory(SCENARIO).model_dump(mode="json", exclude_defaults=True)))
    return str(path)


@pytest.fixture
def gates(monkeypatch):
    """The stages' gates, as the lifecycle asks them (each passes: no engine answers here)."""
    asked: list[str] = []
    monkeypatch.setattr(lifecycle, "gate_ok", lambda run, gate: asked.append(gate.describe()) or True)
    return asked


def _pods(api: StandinApiServer) -> list[str]:
    return [name for plural, name in api.kinds() if plural == "pods"]


def test_healthy_up_applies_waits_execs_collects_and_tears_down(cluster, inventory, gates, capsys):
    run = lifecycle.up(SCENARIO, inventory, {}, "k8s")
    name = "k3lab-k3-a3-mixed"
    assert cluster.kinds() == [("configmaps", f"{name}-files"), ("leaderworkersets", f"{name}-mixed"),
                               ("pods", f"{name}-mixed-0"), ("pods", f"{name}-mixed-0-1"),
                               ("pods", f"{name}-mixed-0-2"), ("pods", f"{name}-mixed-0-3")]
    posts = [(path, q) for method, path, q in cluster.requests if method == "POST"]
    assert all(q.get("fieldValidation") == ["Strict"] for _, q in posts)
    assert [q.get("dryRun") for _, q in posts] == [["All"], ["All"], None, None]  # preflight, then the creates
    # every object, and the pods the LWS made, carry the run label
    assert all(o["metadata"]["labels"]["k3lab.run"] == run.id for o in cluster.objects.values())
    assert run.target.container_names() == {f"node{i}": f"{name}-mixed-0" + (f"-{i}" if i else "") for i in range(4)}
    assert gates, "the stages' gates were asked after the pods were Ready"
    assert {pod for pod, _ in cluster.execs} == set(run.target.container_names().values())  # shell parity, per pod
    assert run.target.exec("node2", ["echo", "hi"]).stdout == "hi\n"
    cluster.logs[f"{name}-mixed-0-2"] = "k3lab: node2: started engine\n"
    lifecycle.collect(run)
    assert (run.dir / "evidence" / "node2" / f"pod-{name}-mixed-0-2.log").read_text() == "k3lab: node2: started engine\n"
    assert set(json.loads((run.dir / "evidence" / "node0" / "inspect.json").read_text())) == {f"{name}-mixed-0"}
    state = runs.run_state(run.dir)
    assert state.status == "up" and state.target == "k8s" and state.model_extra["k8s"]["namespace"] == "k3lab"
    assert lifecycle.down(run) == {}
    assert cluster.kinds() == []
    assert runs.run_state(run.dir).status == "down"
    said = capsys.readouterr().err
    assert (f"run {run.id}: removed 4 Pod(s), 1 LeaderWorkerSet(s), 1 ConfigMap(s) labelled k3lab.run={run.id} "
            f"(context ascend-a3, server {cluster.url}) in ") in said
    assert "container(s)" not in said and "run network" not in said


KEY = "sk-k3lab-test-0123456789"


def test_the_api_key_reaches_the_pods_through_a_secret_and_nowhere_else(cluster, inventory, gates, capsys,
                                                                        monkeypatch):
    scope = RunScope()
    registered_first = []
    real = k8sapi.Cluster.create

    def create(self, obj, dry_run=False):
        if obj["kind"] == "Secret" and not dry_run:
            registered_first.append(f"Secret {obj['metadata']['name']}" in scope.registered())
        return real(self, obj, dry_run)

    monkeypatch.setattr(k8sapi.Cluster, "create", create)
    with settings.patched(api_key=KEY):
        run = lifecycle.up(SCENARIO, inventory, {}, "k8s", scope=scope)
        assert registered_first == [True]
        secret = cluster.objects[("secrets", "k3lab-k3-a3-mixed-api-key")]
        assert secret["stringData"] == {"VLLM_API_KEY": KEY} and secret["metadata"]["labels"]["k3lab.run"] == run.id
        # created first (the pods read it when they start), its deletion registered before its create
        posts = [p for m, p, q in cluster.requests if m == "POST" and "dryRun" not in q]
        assert posts[0].endswith("/secrets")
        for pod in (o for (plural, _), o in cluster.objects.items() if plural == "pods"):
            env = {e["name"]: e for e in pod["spec"]["containers"][0]["env"]}
            assert env["VLLM_API_KEY"] == {"name": "VLLM_API_KEY", "valueFrom": {"secretKeyRef": {
                "name": "k3lab-k3-a3-mixed-api-key", "key": "VLLM_API_KEY", "optional": True}}}
        lifecycle.collect(run)
        assert lifecycle.down(run) == {}
    assert cluster.kinds() == []
    assert "1 Secret(s)" in capsys.readouterr().err
    leaks = [p for p in run.dir.rglob("*") if p.is_file() and KEY in p.read_text(errors="replace")]
    assert leaks == []  # manifests, RUNBOOK, evidence, run-state: the value in none of them
    assert KEY not in "".join(capsys.readouterr())


def test_without_an_api_key_no_secret_is_made_and_the_pods_start_open(cluster, inventory, gates):
    with settings.patched(api_key=None):
        run = lifecycle.up(SCENARIO, inventory, {}, "k8s")
    assert not [k for k in cluster.kinds() if k[0] == "secrets"]
    assert [o["kind"] for o in run.target.objects] == ["ConfigMap", "LeaderWorkerSet"]
    lifecycle.down(run)


def test_a_pod_that_never_becomes_ready_is_named_and_everything_is_removed(cluster, inventory, gates, monkeypatch):
    never = "k3lab-k3-a3-mixed-mixed-0-2"
    cluster.ready = lambda pod: pod != never
    cluster.logs[never] = "line 1\nRuntimeError: NPU 3 is not available\n"
    monkeypatch.setattr(K8sTarget, "gate_timeout", lambda self, stage: 0.5)  # the Ready deadline: their sum
    with pytest.raises(PodsNotReady) as failed:
        lifecycle.up(SCENARIO, inventory, {}, "k8s")
    text = str(failed.value)
    assert f"{never} (node node2, host node2): phase Running" in text and "Ready False (ContainersNotReady)" in text
    assert "not Ready after 1 s" in text and "RuntimeError: NPU 3 is not available" in text
    assert "k3lab-k3-a3-mixed-mixed-0-1" not in text  # the Ready ones are not blamed
    assert cluster.kinds() == [] and gates == []
    (run_dir,) = (settings.current().runs).iterdir()
    assert runs.run_state(run_dir).status == "down"


def test_an_unreachable_api_server_is_named_exit_3_and_nothing_is_made(tmp_path, inventory, capsys):
    config = tmp_path / "kubeconfig"
    config.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "ascend-a3",
        "clusters": [{"name": "gone", "cluster": {"server": "http://127.0.0.1:9"}}],  # discard: nothing listens
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [{"name": "ascend-a3", "context": {"cluster": "gone", "user": "u"}}]}))
    with settings.patched(kubeconfig=config, runs=tmp_path / "runs"):
        assert cli.main(["up", SCENARIO, "-i", inventory, "--target", "k8s"]) == 3
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "context ascend-a3, server http://127.0.0.1:9" in err[0]
    assert "does not answer GET /version" in err[0] and "within 5 s" in err[0]
    assert not (tmp_path / "runs").exists()


def test_the_api_server_gone_mid_run_is_named(cluster, inventory, gates):
    run = lifecycle.up(SCENARIO, inventory, {}, "k8s")
    port = cluster.url
    cluster.__exit__()
    with pytest.raises(k8sapi.ApiUnreachable, match=f"context ascend-a3, server {port}"):
        run.target.liveness(run.plan.processes())
    assert lifecycle.down(run) == {"k8s": port}  # left, and named; the run-state says so
    assert runs.run_state(run.dir).status == "down-incomplete"


def test_missing_kubeconfig_or_extra_is_exit_3(tmp_path, inventory, capsys):
    with settings.patched(kubeconfig=tmp_path / "none"):
        assert cli.main(["cycle", SCENARIO, "-i", inventory, "--target", "k8s"]) == 3
    assert f"a kubeconfig ({tmp_path / 'none'} not found)" in capsys.readouterr().err


def test_an_interrupt_mid_apply_removes_everything_created(cluster, inventory, gates, monkeypatch):
    created = []
    real = k8sapi.Cluster.create

    def create(self, obj, dry_run=False):
        if not dry_run and created:  # the ConfigMap is made; Ctrl-C arrives before the LeaderWorkerSet
            raise KeyboardInterrupt
        real(self, obj, dry_run)
        if not dry_run:
            created.append(obj["kind"])

    monkeypatch.setattr(k8sapi.Cluster, "create", create)
    with pytest.raises(RunInterrupted):
        lifecycle.up(SCENARIO, inventory, {}, "k8s")
    assert created == ["ConfigMap"] and cluster.kinds() == []
    deletes = [(path, q) for method, path, q in cluster.requests if method == "DELETE"]
    assert ("/api/v1/namespaces/k3lab/configmaps/k3lab-k3-a3-mixed-files", {}) in \
        [(p, {k: v for k, v in q.items() if k != "propagationPolicy"}) for p, q in deletes]


def test_teardown_deletes_by_run_label_only(cluster):
    api = k8sapi.Cluster(settings.current().kubeconfig, "ascend-a3", "k3lab")
    for run in ("r1", "r2"):
        obj = next(o for text in _manifests(run).values() for o in yaml.safe_load_all(text) if o["kind"] == "LeaderWorkerSet")
        api.create(obj | {"metadata": {**obj["metadata"], "name": f"lws-{run}"}})
        api.create({"apiVersion": "v1", "kind": "Service", "metadata": {"name": f"svc-{run}", "labels": {"k3lab.run": run}},
                    "spec": {"ports": [{"port": 8000}]}})
    assert len(_pods(cluster)) == 8
    assert api.delete_run("r1", deadline=5) == {"Pod": 4, "LeaderWorkerSet": 1, "Service": 1, "ConfigMap": 0,
                                                  "Secret": 0}  # its pods went with the LWS
    assert {n for _, n in cluster.kinds()} == {"lws-r2", "svc-r2", *(f"lws-r2-0{s}" for s in ("", "-1", "-2", "-3"))}
    policy = {p.rsplit("/", 1)[1]: q.get("propagationPolicy") for m, p, q in cluster.requests if m == "DELETE"}
    assert policy == {"leaderworkersets": ["Foreground"], "services": ["Background"]}
    assert all(q.get("labelSelector") == ["k3lab.run=r1"] for m, _, q in cluster.requests if m == "DELETE")


def test_down_run_removes_a_recorded_k8s_run(cluster, inventory, gates, capsys):
    scope = RunScope()
    run = lifecycle.up(SCENARIO, inventory, {}, "k8s", scope=scope)
    scope.keep()  # as --keep leaves it
    assert _pods(cluster)
    capsys.readouterr()
    assert cli.main(["down", run.id]) == 0
    assert cluster.kinds() == [] and runs.run_state(run.dir).status == "down"
    assert f"run {run.id}: removed 4 Pod(s), 1 LeaderWorkerSet(s), 1 ConfigMap(s) labelled" in capsys.readouterr().err


def _manifests(run: str) -> dict[str, str]:
    from k3lab.render import artefacts

    return artefacts.build(SCENARIO, k8s_inventory(SCENARIO), {}, "k8s", run_label=run).manifests


def test_the_suite_reaches_each_node_through_its_pod(cluster, inventory, gates):
    """conformance/conftest.py's ``hosts`` on a k8s run: the recorded pods, commands through exec."""
    run = lifecycle.up(SCENARIO, inventory, {}, "k8s")
    hosts = K8sTarget.hosts_from_state(runs.run_state(run.dir))
    assert hosts["node1"].run("echo %s", "a b").stdout == "a b\n"
    assert hosts["node1"].exec(["pwd"], workdir="/tmp").stdout == "/tmp\n"
    assert cluster.execs[-1][0] == "k3lab-k3-a3-mixed-mixed-0-1"
    del cluster.objects[("pods", "k3lab-k3-a3-mixed-mixed-0-1")]
    with pytest.raises(AssertionError, match="node1 .*exec in pod k3lab-k3-a3-mixed-mixed-0-1 refused: 404"):
        hosts["node1"].run("true")
    lifecycle.down(run)


def test_down_all_finds_recorded_k8s_runs(cluster, inventory, gates, monkeypatch, capsys):
    monkeypatch.setattr(SimTarget, "down_all", classmethod(lambda cls, states: {"": Removed("0 container(s)")}))
    scope = RunScope()
    run = lifecycle.up(SCENARIO, inventory, {}, "k8s", scope=scope)
    scope.keep()
    capsys.readouterr()
    assert lifecycle.down_all() == 0
    assert cluster.kinds() == [] and runs.run_state(run.dir).status == "down"
    assert (f"run {run.id}: removed 4 Pod(s), 1 LeaderWorkerSet(s), 1 ConfigMap(s) labelled k3lab.run={run.id} "
            "(context ascend-a3") in capsys.readouterr().err


def test_down_all_on_a_kubernetes_only_host_removes_the_k8s_runs_and_exits_0(cluster, inventory, gates, capsys):
    """A machine with a kubeconfig and no Docker engine at all (no socket) and no simulator run recorded: nothing
    of the simulator's can be there, so the k8s run is removed and the exit is 0, the sim named in one line."""
    scope = RunScope()
    run = lifecycle.up(SCENARIO, inventory, {}, "k8s", scope=scope)
    scope.keep()
    capsys.readouterr()
    with settings.patched(docker_host="unix:///nonexistent"):
        assert cli.main(["down", "--all"]) == 0
    err = capsys.readouterr().err
    assert cluster.kinds() == [] and runs.run_state(run.dir).status == "down"
    assert "target sim: removed nothing: no local Docker engine (unix:///nonexistent) and no simulator run recorded" \
        in err
    assert f"run {run.id}: removed 4 Pod(s)" in err


def test_down_all_without_the_engine_of_a_recorded_sim_run_still_removes_the_k8s_runs(cluster, inventory, gates,
                                                                                       tmp_path, capsys):
    """A simulator run is recorded but its engine is gone: that is named (exit 3) and the k8s run is removed."""
    scope = RunScope()
    run = lifecycle.up(SCENARIO, inventory, {}, "k8s", scope=scope)
    scope.keep()
    sim = runs.RunState(run="20260101-000000-sim0", scenario="a3_pd_1m", target="sim", status="up")
    (settings.current().runs / sim.run).mkdir(parents=True)
    (settings.current().runs / sim.run / runs.RUN_STATE).write_text(sim.model_dump_json())
    capsys.readouterr()
    with settings.patched(docker_host="unix:///nonexistent"):
        assert cli.main(["down", "--all"]) == 3
    err = capsys.readouterr().err
    assert cluster.kinds() == [] and runs.run_state(run.dir).status == "down"
    engine = [line for line in err.splitlines() if "target sim: not reached" in line]
    assert len(engine) == 1 and "DOCKER_HOST=unix:///nonexistent: no such socket" in engine[0]
    assert "apt-get install docker.io" in engine[0]
    assert f"run {run.id}: removed 4 Pod(s)" in err
    assert err.strip().splitlines()[-1].endswith("not reached: target sim: 'k3lab down --all' again once they answer")


def test_down_all_names_an_unreachable_api_server_and_asks_docker_all_the_same(cluster, inventory, gates,
                                                                                 monkeypatch, capsys):
    swept = []
    monkeypatch.setattr(SimTarget, "down_all", classmethod(lambda cls, states: swept.append(states) or
                                                           {"": Removed("2 container(s) of k3lab runs")}))
    scope = RunScope()
    run = lifecycle.up(SCENARIO, inventory, {}, "k8s", scope=scope)
    scope.keep()
    server = cluster.url
    cluster.__exit__()  # the API server stops answering
    capsys.readouterr()
    assert cli.main(["down", "--all"]) == 3
    err = capsys.readouterr().err
    assert swept == [[]] and "target sim: removed 2 container(s) of k3lab runs" in err
    assert f"run {run.id}: NOT removed from k8s ({server.split('//')[1].split(':')[0]})" in err
    assert runs.run_state(run.dir).status == "down-incomplete"
    assert runs.run_state(run.dir).left == {"k8s": server}


def test_down_all_a_recorded_k8s_run_it_cannot_place_holds_up_no_other(cluster, inventory, gates, monkeypatch, capsys):
    monkeypatch.setattr(SimTarget, "down_all", classmethod(lambda cls, states: {"": Removed("0 container(s)")}))
    scope = RunScope()
    run = lifecycle.up(SCENARIO, inventory, {}, "k8s", scope=scope)
    scope.keep()
    doc = json.loads((run.dir / runs.RUN_STATE).read_text())
    doc.pop("k8s")  # a run-state that names no context (written by hand, or an older kit)
    doc["run"] = "orphan"
    (settings.current().runs / "orphan").mkdir()
    (settings.current().runs / "orphan" / runs.RUN_STATE).write_text(json.dumps(doc))
    capsys.readouterr()
    assert cli.main(["down", "--all"]) == 3
    err = capsys.readouterr().err
    assert cluster.kinds() == [] and runs.run_state(run.dir).status == "down"
    assert "run orphan: NOT removed from k8s (UsageError: run orphan: its run-state names no k8s context" in err
    assert runs.run_state(settings.current().runs / "orphan").status == "down-incomplete"
