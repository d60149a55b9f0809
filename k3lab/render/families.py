"""One object per scenario family: engine script, launch, MemCache files, proxy and head gates.

``family(sc)`` returns the object for a scenario; callers ask it instead of branching on the family
name. Each class extends its model half (``k3lab.model.families``: deviations, the parsers option,
the hash seed), which lives in the model layer because the catalog and the deviations need it.
Defaults here are the K3.1 Pro guide's (P0-only proxy registration, PP master as the Prefill head).
"""
from __future__ import annotations

from typing import Any, ClassVar

from k3lab.model import families as model
from k3lab.model.catalog import Scenario
from k3lab.model.inventory import Inventory, Node
from k3lab.render import memcache, scripts
from k3lab.render.scripts import Ctx, export, runtime_env_effect
from k3lab.render.shell import Script, Source, w

ENGINE_ROLES = ("prefill", "decode")


class Family(model.FamilyModel):
    """A family's render side; the class attributes and methods here are the defaults."""

    runtime_env: ClassVar[bool] = False  # MemCache nodes get the K3.1 Pro runtime_env.sh (§5.3.1)

    def engine_script(self, ctx: Ctx) -> Script:
        raise NotImplementedError

    def uses_launcher(self, sc: Scenario, role: str) -> bool:
        """Started by launch_online_dp.py (one engine child per DP rank) rather than ``bash`` on the script."""
        return sc.pd and role == "decode"

    def launcher_dp_size(self, sc: Scenario, role: str) -> int:
        return 4  # K3.1 Pro Decode: DP 4, one rank per node

    def launch_prelude(self, sc: Scenario, inv: Inventory, node: Node) -> list[Any]:
        """launch.sh lines before the start command."""
        return [export("PYTHONHASHSEED", 0)] if self.hash_seed(sc, node.role) else []

    def proxy_prefills(self, prefill: list[Node]) -> list[Node]:
        return prefill[:1]  # K3.1 Pro: register only P0 (§5.1.2)

    def head_port(self, inv: Inventory, role: str) -> int:
        """The port whose listening says a role's head is up: PP master on Prefill, else DP RPC."""
        if role == "prefill":
            return inv.ports.master
        return inv.ports.dp_rpc

    def engine_mmc_conf(self, inv: Inventory, node: Node) -> str | None:
        """Where an engine node's own MemCache client config goes, when the family writes one."""
        return None

    def memcache_files(self, sc: Scenario, inv: Inventory, node: Node, meta: Node | None) -> dict[str, tuple[str, str]]:
        return memcache.files_for(sc, inv, node, meta, self.runtime_env, self.engine_mmc_conf(inv, node))

    def metaservice_script(self, inv: Inventory) -> Script:
        return memcache.metaservice_script_k31(inv)


class K3Mixed(model.K3MixedModel, Family):
    def engine_script(self, ctx: Ctx) -> Script:
        return scripts.k3_mixed(ctx)


class K3A2(model.K3A2Model, Family):
    def engine_script(self, ctx: Ctx) -> Script:
        return scripts.k3_a2(ctx)


class K3Pd(model.K3PdModel, Family):
    """K3 8P8D: every engine under launch_online_dp.py, all engines behind the proxy, MemCache on Prefill."""

    def engine_script(self, ctx: Ctx) -> Script:
        return scripts.k3_pd(ctx)

    def uses_launcher(self, sc: Scenario, role: str) -> bool:
        return True

    def launcher_dp_size(self, sc: Scenario, role: str) -> int:
        return sc.roles[role]

    def proxy_prefills(self, prefill: list[Node]) -> list[Node]:
        return prefill

    def head_port(self, inv: Inventory, role: str) -> int:
        return inv.ports.prefill_dp_rpc if role == "prefill" else inv.ports.dp_rpc

    def engine_mmc_conf(self, inv: Inventory, node: Node) -> str | None:
        return f"{inv.paths.memcache_config_dir}/mmc-local.conf" if node.role == "prefill" else None

    def metaservice_script(self, inv: Inventory) -> Script:
        return memcache.metaservice_script_k3(inv)


class K31A3(model.K31A3Model, Family):
    runtime_env = True

    def engine_script(self, ctx: Ctx) -> Script:
        return scripts.k31_a3(ctx)


class K31A3Pooled(model.K31A3PooledModel, Family):
    runtime_env = True

    def engine_script(self, ctx: Ctx) -> Script:
        return scripts.k31_a3_pooled(ctx)


class K31A5(model.K31A5Model, Family):
    runtime_env = True

    def engine_script(self, ctx: Ctx) -> Script:
        return scripts.k31_a5(ctx)

    def launch_prelude(self, sc: Scenario, inv: Inventory, node: Node) -> list[Any]:
        if not sc.params.get("pooled"):
            return super().launch_prelude(sc, inv, node)
        # K3.1 Pro §5.3.6: MF runtime environment plus the node's client config in the launch shell.
        d = inv.paths.memcache_config_dir
        return [Source(w(f"{d}/runtime_env.sh"), effect=runtime_env_effect),
                export("MMC_LOCAL_CONFIG_PATH", f"{d}/nodes/{node.name}/mmc-local.conf")]

    def engine_mmc_conf(self, inv: Inventory, node: Node) -> str | None:
        if node.role in ENGINE_ROLES:
            return f"{inv.paths.memcache_config_dir}/nodes/{node.name}/mmc-local.conf"
        return None


FAMILIES: dict[str, Family] = {f.name: f for f in (K3Mixed(), K3A2(), K3Pd(), K31A3(), K31A3Pooled(), K31A5())}


def family(sc: Scenario) -> Family:
    return FAMILIES[sc.family]
