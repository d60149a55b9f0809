"""Every flag and exported variable of every seed command is in the rendered plan, or a listed deviation."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from k3lab.model import siminventory
from k3lab.render import artefacts as render

SEEDS = Path(__file__).resolve().parents[4] / "shared" / "seeds"
K3 = "000_d4c4fad20ac2ebd8.txt"
K31 = "002_6ab7298b1aa1dc3e.txt"

# scenario -> (seed file, text that starts its section, text that ends it, render options)
SECTIONS = {
    "k3_a3_mixed": (K3, "5.1.1 Four-Node Mixed Deployment", "5.1.2 Sixteen-Node PD", {}),
    "k3_a3_pd": (K3, "5.1.2 Sixteen-Node PD", "5.2 Atlas 800 A2 Deployment\n", {}),
    "k3_a2_mixed": (K3, "5.2.1 Eight-Node Mixed Deployment", "6 Functional Verification", {}),
    "a3_pd": (K31, "5.1.1 Create the Engine Templates", "950DT Products use eight nodes", {"draft": "/root/.cache/d"}),
    "a5_pd": (K31, "950DT Products use eight nodes", "Key deployment parameters:", {}),
    "a3_pd_1m": (K31, "5.2.1 Create the Engine Templates", "950DT Products 1M deployment", {}),
    "a5_pd_1m": (K31, "950DT Products 1M deployment", "5.2.2 Start and Verify", {}),
    "a3_pd_pooled": (K31, "5.3.5 Create the Engine Templates", "The 950DT Products pooled templates use", {}),
    "a5_pd_pooled": (K31, "Lookup Identifier Assignments", "5.3.6 Start the Engines", {}),
}
FLAG = re.compile(r"(?<![\w-])(--[a-z][a-z0-9_.-]*[a-z0-9])")
EXPORT = re.compile(r"^\s*export\s+([A-Z_][A-Z0-9_]*)=", re.M)


def section(name: str) -> str:
    seed, start, end, _ = SECTIONS[name]
    text = (SEEDS / seed).read_text()
    i = text.index(start)
    return text[i:text.index(end, i + len(start))]


@pytest.mark.skipif(not SEEDS.is_dir(), reason="needs ../shared/seeds")
@pytest.mark.parametrize("sid", sorted(SECTIONS))
def test_seed_flags_and_env_are_rendered_or_deviations(sid):
    text = section(sid)
    r = render.build(sid, siminventory.default(sid), SECTIONS[sid][3])
    procs = r.plan.processes()
    argv_flags = {a.split("=", 1)[0] for p in procs for a in p.argv if a.startswith("--")}
    env_names = {k for p in procs for k in p.env} | {k for p in procs for k in p.unset}
    deviation_text = " ".join(d.what for d in r.plan.deviations)
    missing_flags = sorted(f for f in set(FLAG.findall(text)) - argv_flags if f not in deviation_text)
    missing_env = sorted(e for e in set(EXPORT.findall(text)) - env_names if e not in deviation_text)
    assert not missing_flags, f"{sid}: seed flags not rendered and not deviations: {missing_flags}"
    assert not missing_env, f"{sid}: seed variables not rendered and not deviations: {missing_env}"
