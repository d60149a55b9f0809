"""Golden: what the nodes actually run equals the rendered plan, and the golden snapshots by default."""
from __future__ import annotations

import ipaddress
import re

import pytest

from k3lab.conform.plugin import skip
from k3lab.render import golden

KIND = "kit"  # a mismatch here means the kit staged something other than what it rendered


def _staged(node):
    return [a for a in node.artefacts if a.path.startswith("/")]


@pytest.mark.conformance(
    id="golden.test_staged_artefacts_match_rendered", area="golden",
    must="Every artefact staged on a node MUST equal the rendered file, byte for byte.",
    remedy="re-stage the run (k3lab down, then up) instead of editing files on the node; a change the lab needs goes into the inventory and k3lab render.")
def test_staged_artefacts_match_rendered(node, tools, run_dir):
    if not _staged(node):
        skip("no-staged-artefacts", "no staged artefacts")
    differ = []
    for art in _staged(node):
        live = tools[node.name].file(art.path)
        rendered = (run_dir / "rendered" / node.name / art.name).read_text()
        if not live.exists or live.content_string != rendered:
            differ.append(art.path)
    assert not differ, f"{node.name}: staged files differ from the rendered plan: {differ}"


@pytest.mark.conformance(
    id="golden.test_rendered_equals_golden", area="golden",
    must="With the default inventory, the rendered artefacts MUST equal golden/.",
    remedy="review the render change; if intended, update golden/ with nox -s golden -- --snapshot-update and commit the diff.")
def test_rendered_equals_golden(plan, run_dir):
    if not plan.inventory.startswith("default (sim"):
        skip("lab-inventory", "a lab inventory renders its own values; compare with k3lab render and golden/ by hand")
    moved = _moved_subnet(plan.inventory)
    differ = golden.drift(plan, lambda node, name: _to_default_subnet((run_dir / "rendered" / node / name).read_text(),
                                                                      moved))
    assert not differ, f"rendered artefacts drifted from golden/: {differ} (review, then nox -s golden -- --snapshot-update)"


def _moved_subnet(inventory: str) -> ipaddress.IPv4Network | ipaddress.IPv6Network | None:
    """``default (sim, subnet X)``: the default inventory on other networks (k3lab release slots)."""
    m = re.search(r"subnet (\S+)\)$", inventory)
    return ipaddress.ip_network(m.group(1)) if m else None


def _to_default_subnet(text: str, moved) -> str:
    """Addresses of the moved subnet back to the same host offsets of the default one."""
    if moved is None:
        return text
    from k3lab.model.inventory import Sim

    base = ipaddress.ip_network(Sim.model_validate({}).subnet)  # the defaults

    def back(m: re.Match) -> str:
        addr = ipaddress.ip_address(m.group(0))
        if addr in moved:
            return str(base.network_address + (int(addr) - int(moved.network_address)))
        return m.group(0)

    return re.sub(r"(?<![\d.])\d{1,3}\.\d{1,3}\.\d{1,3}\.\d{1,3}(?![\d.])", back, text)
