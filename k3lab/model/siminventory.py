"""The default inventory: what the sim target runs when no inventory is given."""
from __future__ import annotations

import ipaddress
from collections.abc import Callable
from typing import TypeVar, cast

from pydantic import BaseModel

from k3lab import settings
from k3lab.model import catalog
from k3lab.model.inventory import Inventory, Node, Sim

_M = TypeVar("_M", bound=BaseModel)


def _construct(cls: type[_M], **data: object) -> _M:
    """``cls.model_construct(**data)`` with the default factories called here: pydantic's own call inspects each
    factory's signature first (tokenizing ``list``'s text signature, about a millisecond a node)."""
    made = {name: cast(Callable[[], object], f.default_factory)() for name, f in cls.model_fields.items()
            if name not in data and f.default_factory is not None}
    return cls.model_construct(set(data), **data, **made)


def default(scenario_id: str, sim: Sim | None = None) -> Inventory:
    """Nodes on the kit's private network, NIC eth0, the documented default ports.

    Built without validation (``model_construct``: no validator is built for the static commands);
    ``tests/unit/model/test_plan.py`` validates it for every scenario.
    """
    sc = catalog.get(scenario_id)
    sim = sim or from_env()
    net = ipaddress.ip_network(sim.subnet)
    hosts = list(net.hosts())

    def ip(offset: int) -> str:
        return str(hosts[offset])

    nodes: list[Node] = []
    if sc.pd:
        for i in range(sc.roles["prefill"]):
            nodes.append(_construct(Node, name=f"p{i}", role="prefill", rank=i, local_ip=ip(10 + i), nic="eth0"))
        for i in range(sc.roles["decode"]):
            nodes.append(_construct(Node, name=f"d{i}", role="decode", rank=i, local_ip=ip(30 + i), nic="eth0"))
    else:
        for i in range(sc.roles["mixed"]):
            nodes.append(_construct(Node, name=f"node{i}", role="mixed", rank=i, local_ip=ip(10 + i), nic="eth0"))
    if sc.pool != "none":
        nodes.append(_construct(Node, name="meta", role="metaservice", local_ip=ip(4), nic="eth0"))
    return _construct(Inventory, scenario=scenario_id, sim=sim, nodes=nodes)


NAME = "default (sim)"
# ``k3lab release`` runs two sim scenarios at once on one engine; each needs its own networks.
SUBNET_ENV, DEVICE_SUBNET_ENV = "K3LAB_SIM_SUBNET", "K3LAB_SIM_DEVICE_SUBNET"


def from_env() -> Sim:
    """The default networks, or the ones $K3LAB_SIM_SUBNET / $K3LAB_SIM_DEVICE_SUBNET name."""
    s = settings.current()  # the settings checked the variables: a network of at least 8 addresses
    return Sim.model_construct(subnet=s.sim_subnet, device_subnet=s.sim_device_subnet)


def name() -> str:
    """``default (sim)``, or ``default (sim, subnet X)`` when the networks were moved (golden normalises)."""
    sim, base = from_env(), Sim.model_construct()
    return NAME if sim.subnet == base.subnet else f"{NAME[:-1]}, subnet {sim.subnet})"
