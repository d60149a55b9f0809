"""The renderer records each engine's topology in the plan (``Process.topology``) from the command it built;
preflight reads those fields. The record must say what the command says, for every engine of every scenario."""
from __future__ import annotations

import json

import pytest

from k3lab.model import catalog, siminventory
from k3lab.model.plan import Plan, Topology, flag
from k3lab.render import artefacts as render
from k3lab.tools import faults


@pytest.mark.parametrize("sid", sorted(catalog.SCENARIOS))
def test_every_engine_records_the_topology_of_its_command(sid):
    plan = render.build(sid, siminventory.default(sid)).plan
    engines = [p for p in plan.processes() if p.kind == "engine"]
    assert engines
    for proc in engines:
        topo = proc.topology
        assert topo is not None, proc.id
        assert topo == Topology.of(proc.argv), proc.id
        assert topo.tensor_parallel_size == int(flag(proc.argv, "--tensor-parallel-size", "1"))
        assert topo.model == proc.argv[2]
        if (raw := flag(proc.argv, "--kv-transfer-config")) is not None:
            assert topo.kv_transfer_config == json.loads(raw)


def test_the_record_survives_plan_json():
    plan = render.build("k3_a3_pd", siminventory.default("k3_a3_pd")).plan
    back = Plan.model_validate_json(plan.model_dump_json())
    assert [p.topology for p in back.processes()] == [p.topology for p in plan.processes()]


def test_malformed_values_read_as_unset():
    topo = Topology.of(["vllm", "serve", "/m", "--tensor-parallel-size", "eight", "--kv-transfer-config", "[1]"])
    assert topo.tensor_parallel_size == 1 and topo.kv_transfer_config == {} and topo.model == "/m"


def test_a_fault_that_changes_a_command_changes_its_record():
    # the static fault rows stand for a renderer that rendered a wrong command: preflight must see it
    r = faults.m_max_len()
    proc = next(p for p in r.plan.processes() if p.id == "d1/engine1")
    assert proc.topology is not None and proc.topology.max_model_len == 204800
