"""Component versions read from the nodes themselves: the evidence of what a run actually ran.

One ``docker exec`` per node (through that node's own endpoint) runs a small shell script that
prints sections:

* ``python3`` + ``importlib.metadata`` for vllm, vllm-ascend, memcache-hybrid, memfabric-hybrid
  (what ``pip show`` reads, in the interpreter the engines use);
* ``/usr/local/Ascend/driver/version.info`` (``Version=``), mounted from the host by the guides;
* the CANN toolkit's ``ascend_toolkit_install.info`` (``version=``) under ``latest/<arch>-linux``;
* the first lines of ``npu-smi info`` (``Version: ...`` of the driver tools);

and the Docker API of the node's endpoint gives the image id and repo digest. The result is
``versions.json`` in the run directory: ``{"nodes": {node: {component: version}}, "summary":
{component: version or "mixed: a | b"}}``. A component a node does not have is ``null``.
"""
from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from k3lab import outputs
from k3lab.model import catalog, pins

FILE = "versions.json"
PACKAGES = {"vllm": "vllm", "vllm_ascend": "vllm-ascend", "memcache_hybrid": "memcache-hybrid",
            "memfabric_hybrid": "memfabric-hybrid"}
# The version each guide was validated on (K3 guide §1, K3.1 Pro guide intro; §5.3.1 for MemCache).
GUIDE_VERSIONS = {
    "000_d4c4fad20ac2ebd8": {"vllm_ascend": "0.23.0", "vllm": "0.23.0"},
    "002_6ab7298b1aa1dc3e": {"vllm_ascend": "0.30.0", "vllm": "0.30.0", "memcache_hybrid": "1.3.0",
                             "memfabric_hybrid": "1.3.0"},
}
MARK = "=====k3lab:"
PROBE = r"""
echo "{m}packages"
python3 - <<'EOF' 2>&1
import json
try:
    from importlib import metadata
except ImportError:
    import importlib_metadata as metadata
out = {{}}
for key, dist in {packages!r}.items():
    try:
        out[key] = metadata.version(dist)
    except Exception:
        out[key] = None
print(json.dumps(out))
EOF
echo "{m}driver"
cat /usr/local/Ascend/driver/version.info 2>/dev/null
echo "{m}cann"
cat /usr/local/Ascend/ascend-toolkit/latest/*-linux/ascend_toolkit_install.info 2>/dev/null
echo "{m}npu-smi"
timeout 20 npu-smi info 2>&1 | head -n 4
echo "{m}end"
""".format(m=MARK, packages=PACKAGES)


def guide_versions(seed: str) -> dict[str, str]:
    """``seed`` as plan.json names it, e.g. ``seeds/000_d4c4fad20ac2ebd8.txt (Kimi-K3, ...)``."""
    m = re.search(r"\d{3}_[0-9a-f]{16}", seed)
    return dict(GUIDE_VERSIONS.get(m.group(0), {})) if m else {}


def guide_of(scenario: str) -> dict[str, str]:
    return guide_versions(catalog.get(scenario).seed)


def _kv(text: str) -> dict[str, str]:
    out = {}
    for line in text.splitlines():
        if "=" in line:
            k, v = line.split("=", 1)
            out[k.strip().lower()] = v.strip()
    return out


def parse_probe(output: str) -> dict[str, str | None]:
    """The probe script's output -> {component: version or None}."""
    sections: dict[str, str] = {}
    current = None
    for line in output.splitlines():
        if line.startswith(MARK):
            current = line[len(MARK):].strip()
            sections[current] = ""
        elif current:
            sections[current] += line + "\n"
    out: dict[str, str | None] = {k: None for k in PACKAGES}
    pkgs = sections.get("packages", "").strip().splitlines()
    if pkgs:
        try:
            doc = json.loads(pkgs[-1])
            out.update({k: (str(v) if v else None) for k, v in doc.items() if k in PACKAGES})
        except ValueError:
            pass
    out["driver"] = _kv(sections.get("driver", "")).get("version") or None
    out["cann"] = _kv(sections.get("cann", "")).get("version") or None
    m = re.search(r"npu-smi\s+\S+\s+Version:\s*(\S+)", sections.get("npu-smi", ""))
    out["npu_smi"] = m.group(1) if m else None
    return out


def image_of(container) -> dict[str, str | None]:
    """Image id and repo digest from the Docker API of the node's own endpoint."""
    try:
        container.reload()
        image_id = container.attrs.get("Image")
        name = container.attrs.get("Config", {}).get("Image")
        digests: list[str] = []
        try:
            digests = container.client.images.get(image_id).attrs.get("RepoDigests") or []
        except Exception:  # image removed or not inspectable: the id is still evidence
            pass
        return {"image": digests[0] if digests else image_id, "image_name": name}
    except Exception:
        return {"image": None, "image_name": None}


def probe(run) -> dict[str, Any]:
    """Read every node's versions (one exec each, in parallel) and write RUN_DIR/versions.json."""
    nodes: dict[str, dict[str, str | None]] = {}

    missing = {n.name: f"{n.name}: no container of this run to read" for n in run.plan.nodes
               if n.name not in run.backend.containers}

    def one(node) -> None:
        if node.name not in run.backend.containers:
            return
        # sections are read by their markers, so a probe cut short still gives the sections it
        # printed, and an exec error's text (no markers) gives none: the status adds nothing
        found = parse_probe(run.backend.exec(node.name, ["bash", "-c", PROBE], timeout=40).output)
        found.update(image_of(run.backend.containers[node.name]))
        nodes[node.name] = found

    # on a lab, a host that does not answer within the backend's deadline is named, the rest read
    failed = run.backend.parallel(one, run.plan.nodes, getattr(run.backend, "host_deadline", None))
    doc = {"schema": 1, "source": "docker exec on each node + Docker API of its endpoint",
           "guide": guide_versions(run.plan.seed), "nodes": dict(sorted(nodes.items())), "summary": summarise(nodes)}
    failed = {**missing, **failed}
    if failed:  # the gate judges versions on every plan node: these make them INCOMPLETE, never PASS
        doc["unanswered"] = dict(sorted(failed.items()))
    outputs.write_run_file(Path(run.dir) / FILE, json.dumps(doc, indent=2) + "\n")
    return doc


def summarise(nodes: dict[str, dict[str, str | None]]) -> dict[str, str | None]:
    keys = list(PACKAGES) + ["cann", "driver", "npu_smi", "image", "image_name"]
    out: dict[str, str | None] = {}
    for key in keys:
        values = sorted({v for n in nodes.values() if (v := n.get(key))})
        out[key] = values[0] if len(values) == 1 else ("mixed: " + " | ".join(values) if values else None)
    return out


def load(run_dir: str | Path) -> dict[str, Any]:
    """The run's versions.json; {} when missing or half-written (the gate says so). A FIFO, a device, a
    huge file or a field of the wrong type is an InputError naming it (the one bounded reader, its model)."""
    from k3lab.model import runs

    path = Path(run_dir) / FILE
    if not path.exists() and not path.is_symlink():
        return {}
    try:
        doc = runs.read_doc(path)
    except ValueError:
        return {}
    if isinstance(doc, dict):  # a field of the wrong type: an InputError naming file and field (exit 2)
        runs.versions(run_dir)
    return doc if isinstance(doc, dict) else {}


# how a version read from the nodes meets a policy's pin or range (the policy validates with the same rules)
matches, check_expect, is_range = pins.matches, pins.check_expect, pins.is_range


def sim_package_files(seed: str) -> dict[str, tuple[bytes, int]]:
    """dist-info METADATA for the sim's stand-in packages, as the guide's image would carry them."""
    files = {}
    for key, version in guide_versions(seed).items():
        if key not in ("vllm", "vllm_ascend"):  # MemCache's dist-info is in the image (one version)
            continue
        dist = PACKAGES[key]
        path = f"/opt/k3lab-sim/site/{dist.replace('-', '_')}-{version}.dist-info"
        meta = f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\nSummary: k3lab simulator stand-in\n"
        files[f"{path}/METADATA"] = (meta.encode(), 0o644)
        files[f"{path}/INSTALLER"] = (b"k3lab-sim\n", 0o644)
    return files
