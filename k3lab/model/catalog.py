"""The documented scenarios: one typed spec per topology of the two deployment guides.

A :class:`Scenario` says what the guide fixes (platform, node counts per role, served name,
image, limits, which scripts and start order); the script builders in ``k3lab.render.scripts``
turn it plus an inventory node into the guide-shaped script. Scenario ids are fixed: users type
them (``nox -s a3_pd_1m``).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from k3lab.errors import UsageError
from k3lab.model import families

Platform = Literal["A3", "A2", "950DT"]
DEVICES = {"A3": 16, "A2": 8, "950DT": 8}

SEED_K3 = "seeds/000_d4c4fad20ac2ebd8.txt (Kimi-K3, vLLM-Ascend 0.23.0)"
SEED_K31 = "seeds/002_6ab7298b1aa1dc3e.txt (Kimi K3.1 Pro, vLLM-Ascend 0.30.0)"


@dataclass(frozen=True)
class Scenario:
    id: str
    title: str
    seed: str
    section: str
    family: Literal["k3_mixed", "k3_a2", "k3_pd", "k31_a3", "k31_a3_pooled", "k31_a5"]
    platform: Platform
    served_name: str
    model_path: str
    image: str
    container_name: str
    roles: dict[str, int]  # role -> node count
    max_model_len: int
    pool: Literal["none", "meta", "providers"] = "none"
    dspark: Literal["never", "optional", "always"] = "never"
    language_model_only: bool = False
    params: dict[str, object] = field(default_factory=dict)

    @property
    def devices(self) -> int:
        return DEVICES[self.platform]

    @property
    def openeuler_image(self) -> str:
        """The guide's openEuler build of the image: both guides' image lists give it as the default tag
        plus '-openeuler' (seeds 000 and 002, the IMAGE exports)."""
        return f"{self.image}-openeuler"

    @property
    def pd(self) -> bool:
        return "prefill" in self.roles

    @property
    def node_count(self) -> int:
        return sum(self.roles.values()) + (1 if self.pool != "none" else 0)

    @property
    def draft_default(self) -> str:
        return "/root/.cache/Kimi-K3.1-Pro-DSpark3" + ("-mxfp" if self.platform == "950DT" else "")


K3_A3_IMAGE = "quay.io/ascend/vllm-ascend:kimi-k3-a3"
K3_A2_IMAGE = "quay.io/ascend/vllm-ascend:kimi-k3"
K31_A3_IMAGE = "quay.io/ascend/vllm-ascend:kimi-k3.1-pro-a3"
K31_A5_IMAGE = "quay.io/ascend/vllm-ascend:kimi-k3.1-pro-a5"
K3_MODEL = "/root/.cache/Kimi-K3-w4a8"
K31_A3_MODEL = "/root/.cache/Kimi-K3.1-Pro-w4a8"
K31_A5_MODEL = "/root/.cache/Kimi-K3.1-Pro-w4a8-mxfp"

# K3 §5.1.1 defaults; the variants change only what their section's table changes.
_K3_MIXED = dict(dp=4, max_num_seqs=16, max_num_batched_tokens=24576, gpu_memory_utilization="0.9")


def _k3_mixed(id: str, title: str, section: str, nodes: int, max_model_len: int, **over: object) -> Scenario:
    params = {**_K3_MIXED, "dp": nodes, **over}
    return Scenario(
        id=id, title=title, seed=SEED_K3, section=section, family="k3_mixed", platform="A3",
        served_name="kimi-k3", model_path=K3_MODEL, image=K3_A3_IMAGE, container_name="vllm-ascend",
        roles={"mixed": nodes}, max_model_len=max_model_len, params=params,
    )


def _k31_a3(id: str, title: str, section: str, max_model_len: int, pooled: bool = False) -> Scenario:
    return Scenario(
        id=id, title=title, seed=SEED_K31, section=section,
        family="k31_a3_pooled" if pooled else "k31_a3", platform="A3",
        served_name="kimi-k3.1-pro", model_path=K31_A3_MODEL, image=K31_A3_IMAGE, container_name="kimi-k31",
        roles={"prefill": 4, "decode": 4}, max_model_len=max_model_len,
        pool="providers" if pooled else "none", dspark="always" if pooled else "optional",
        params={"layer_partition": "25,25,24,19"},
    )


def _k31_a5(id: str, title: str, section: str, max_model_len: int, pooled: bool = False) -> Scenario:
    return Scenario(
        id=id, title=title, seed=SEED_K31, section=section, family="k31_a5", platform="950DT",
        served_name="kimi-k3.1-pro", model_path=K31_A5_MODEL, image=K31_A5_IMAGE, container_name="kimi-k31",
        roles={"prefill": 4, "decode": 4}, max_model_len=max_model_len,
        pool="meta" if pooled else "none", dspark="always",
        params={"layer_partition": "24,24,24,21", "pooled": pooled},
    )


SCENARIOS: dict[str, Scenario] = {s.id: s for s in [
    _k31_a3("a3_pd", "K3.1 Pro A3 8-node 4P4D PD", "K3.1 Pro §5.1 (A3)", 204800),
    _k31_a3("a3_pd_1m", "K3.1 Pro A3 8-node 4P4D PD, 1M context", "K3.1 Pro §5.2 (A3)", 1048576),
    _k31_a3("a3_pd_pooled", "K3.1 Pro A3 4P4D PD with MetaService and 8 MemCache providers",
            "K3.1 Pro §5.3 (A3)", 1048576, pooled=True),
    _k31_a5("a5_pd", "K3.1 Pro 950DT 8-node 4P4D PD", "K3.1 Pro §5.1 (950DT)", 140000),
    _k31_a5("a5_pd_1m", "K3.1 Pro 950DT 8-node 4P4D PD, 1M context", "K3.1 Pro §5.2 (950DT)", 1048576),
    _k31_a5("a5_pd_pooled", "K3.1 Pro 950DT 4P4D PD with MetaService pool", "K3.1 Pro §5.3 (950DT)",
            172032, pooled=True),
    _k3_mixed("k3_a3_mixed", "K3 A3 4-node mixed DP4/TP16/EP64", "K3 §5.1.1", 4, 131072),
    _k3_mixed("k3_a3_mixed_1m", "K3 A3 8-node mixed DP8, 1M context", "K3 §5.1.1 note", 8, 1048576,
              max_num_batched_tokens=8192),
    _k3_mixed("k3_a3_mixed_toolcall", "K3 A3 4-node mixed, ToolCall validation values", "K3 §7.5", 4, 286720,
              max_num_seqs=4, max_num_batched_tokens=8192, gpu_memory_utilization="0.97"),
    _k3_mixed("k3_a3_mixed_perf", "K3 A3 4-node mixed, performance-test values", "K3 §8.2", 4, 250000,
              max_num_batched_tokens=8192, gpu_memory_utilization="0.95"),
    Scenario(
        id="k3_a3_pd", title="K3 A3 16-node 8P8D PD with MemCache pool on Prefill", seed=SEED_K3,
        section="K3 §5.1.2", family="k3_pd", platform="A3", served_name="kimi-k3", model_path=K3_MODEL,
        image=K3_A3_IMAGE, container_name="vllm-ascend", roles={"prefill": 8, "decode": 8},
        max_model_len=133120, pool="meta",
    ),
    Scenario(
        id="k3_a2_mixed", title="K3 A2 8-node mixed DP8/TP8/EP64, language model only", seed=SEED_K3,
        section="K3 §5.2.1", family="k3_a2", platform="A2", served_name="kimi-k3", model_path=K3_MODEL,
        image=K3_A2_IMAGE, container_name="vllm-ascend", roles={"mixed": 8}, max_model_len=262144,
        language_model_only=True, params={"dp": 8},
    ),
]}


# -o KEY=VALUE options: help text, and which scenarios each one changes (preflight warns otherwise)
OPTIONS = {
    "draft": "DSpark3 draft checkpoint path (a3_pd, a3_pd_1m: enables DSpark3; others: overrides the path)",
    "parsers": "on|off: reasoning/tool parser flags where the guide's templates omit them (950DT, K3 8P8D)",
}


def option_applies(key: str, sc: Scenario) -> bool:
    if key == "draft":
        return sc.dspark != "never"
    if key == "parsers":
        return families.MODELS[sc.family].parsers_option
    return False


class UnknownScenario(UsageError, KeyError):
    def __str__(self) -> str:
        from k3lab.model.hints import hint

        return f"unknown scenario {self.args[0]!r}{hint(str(self.args[0]), SCENARIOS)} (known: {', '.join(SCENARIOS)})"


def get(scenario_id: str) -> Scenario:
    try:
        return SCENARIOS[scenario_id]
    except KeyError:
        raise UnknownScenario(scenario_id) from None
