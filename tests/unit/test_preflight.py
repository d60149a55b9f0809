"""Every preflight check: one mutation that triggers exactly it, and the healthy default that passes."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from launchers import catalog, preflight, render, siminventory
from launchers.inventory import Inventory


def rendered(sid: str, **inv_update) -> render.Rendered:
    inv = siminventory.default(sid)
    if inv_update:
        inv = Inventory.model_validate(inv.model_dump() | inv_update)
    return render.build(sid, inv)


def proc(r: render.Rendered, pid: str):
    return next(p for p in r.plan.processes() if p.id == pid)


def set_flag(argv: list[str], name: str, value: str | None) -> None:
    i = argv.index(name)
    if value is None:
        del argv[i:i + 2]
    else:
        argv[i + 1] = value


def failing(r: render.Rendered, checkpoints: Path = preflight.FIXTURES) -> set[str]:
    return {f.check for f in preflight.run(r.plan, r.files, checkpoints)}


@pytest.mark.parametrize("sid", list(catalog.SCENARIOS))
def test_healthy_default_passes_every_check(sid):
    r = rendered(sid)
    assert preflight.run(r.plan, r.files) == []


def _nodes_with_ranks(sid, ranks):
    inv = siminventory.default(sid).model_dump()
    for node, rank in ranks.items():
        next(n for n in inv["nodes"] if n["name"] == node)["rank"] = rank
    return render.build(sid, Inventory.model_validate(inv))


def m_dp_ranks():
    return _nodes_with_ranks("k3_a3_mixed", {"node2": 1})


def m_pp_ranks():
    return _nodes_with_ranks("a3_pd", {"p2": 1})


def m_devices():
    r = rendered("a3_pd")
    proc(r, "d0/engine0").devices = list(range(8))
    return r


def m_ports():
    inv = siminventory.default("a3_pd")
    return render.build("a3_pd", inv.model_copy(update={"ports": inv.ports.model_copy(update={"proxy": 8000})}))


def m_kv_reserved():
    inv = siminventory.default("a3_pd")
    return render.build("a3_pd", inv.model_copy(update={"ports": inv.ports.model_copy(update={"kv_prefill": 30000})}))


def m_addresses():
    r = rendered("a3_pd")
    proc(r, "d1/engine1").env["HCCL_IF_IP"] = "172.28.0.99"
    return r


def m_mmc_urls():
    r = rendered("a3_pd_pooled")
    r.files["p1"]["mmc-local.conf"] = r.files["p1"]["mmc-local.conf"].replace("172.28.0.5:5000", "172.28.0.6:5000")
    return r


def m_pd_sizes():
    r = rendered("a3_pd")
    argv = proc(r, "d0/engine0").argv
    kv = json.loads(preflight.flag(argv, "--kv-transfer-config"))
    kv["kv_connector_extra_config"]["decode"]["tp_size"] = 8
    set_flag(argv, "--kv-transfer-config", json.dumps(kv))
    return r


def m_parsers():
    r = rendered("a3_pd")
    set_flag(proc(r, "p1/engine").argv, "--tool-call-parser", None)
    return r


def m_hashseed():
    r = rendered("a3_pd")
    proc(r, "d2/engine2").env.pop("PYTHONHASHSEED")
    return r


def m_pp_partition():
    r = rendered("a3_pd")
    proc(r, "p1/engine").env["VLLM_PP_LAYER_PARTITION"] = "25,25,24"
    return r


def m_dspark():
    r = rendered("a3_pd_pooled")
    argv = proc(r, "d0/engine0").argv
    spec = json.loads(preflight.flag(argv, "--speculative-config"))
    spec["draft_tensor_parallel_size"] = 4
    set_flag(argv, "--speculative-config", json.dumps(spec))
    return r


def m_mmc_pool():
    r = rendered("a3_pd_pooled")
    r.files["d3"]["mmc-local.conf"] = r.files["d3"]["mmc-local.conf"].replace("dram.size = 0GB", "dram.size = 1GB")
    return r


def m_one_m():
    r = rendered("k3_a3_mixed")
    r.plan.expect.max_model_len = 1048576
    for p in r.plan.processes():
        if p.kind == "engine":
            set_flag(p.argv, "--max-model-len", "1048576")
    return r


def m_proxy_vars():
    r = rendered("a3_pd")
    proc(r, "p0/engine").unset.remove("http_proxy")
    return r


def m_model():
    r = rendered("a3_pd")
    set_flag(proc(r, "d3/engine3").argv, "--served-model-name", "kimi-k3")
    return r


def m_container():
    r = rendered("a3_pd")
    r.plan.node("d1").container.shm_size = "64m"
    return r


def m_launcher():
    r = rendered("a3_pd")
    proc(r, "d0/launcher").argv.extend(["--pp-size", "1"])
    return r


MUTATIONS = {
    "PF-DP-RANKS": m_dp_ranks, "PF-PP-RANKS": m_pp_ranks, "PF-DEVICES": m_devices, "PF-PORTS": m_ports,
    "PF-KV-RESERVED": m_kv_reserved, "PF-ADDRESSES": m_addresses, "PF-MMC-URLS": m_mmc_urls,
    "PF-PD-SIZES": m_pd_sizes, "PF-PARSERS": m_parsers, "PF-HASHSEED": m_hashseed,
    "PF-PP-PARTITION": m_pp_partition, "PF-DSPARK": m_dspark, "PF-MMC-POOL": m_mmc_pool, "PF-1M-NODES": m_one_m,
    "PF-PROXY-VARS": m_proxy_vars, "PF-MODEL": m_model, "PF-CONTAINER": m_container, "PF-LAUNCHER": m_launcher,
}


def test_every_check_has_a_mutation():
    assert set(MUTATIONS) | {"PF-TP-HEADS"} == {c.id for c in preflight.CHECKS}


@pytest.mark.parametrize("check_id", sorted(MUTATIONS))
def test_mutation_fails_exactly_its_check(check_id):
    r = MUTATIONS[check_id]()
    assert failing(r) == {check_id}
    finding = next(f for f in preflight.run(r.plan, r.files) if f.check == check_id)
    assert "Remedy:" in finding.message


def test_tp_not_dividing_heads(tmp_path):
    for name in ("Kimi-K3.1-Pro-w4a8", "Kimi-K3.1-Pro-DSpark3"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "config.json").write_text(json.dumps({"num_attention_heads": 60, "num_hidden_layers": 93}))
    r = rendered("a3_pd")
    assert failing(r, tmp_path) == {"PF-TP-HEADS"}


def test_missing_checkpoint_is_a_warning(tmp_path):
    r = rendered("a3_pd")
    found = preflight.run(r.plan, r.files, tmp_path)
    assert [f.check for f in found] == ["PF-CHECKPOINT"] and found[0].severity == "warning"


def test_k3_launcher_seed_defect_is_a_listed_deviation():
    r = rendered("k3_a3_pd")
    launcher = proc(r, "p0/launcher")
    assert "--pp-size" not in launcher.argv
    assert any(d.id == "k3-pp-size" for d in r.plan.deviations)
