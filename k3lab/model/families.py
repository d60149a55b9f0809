"""Scenario families, the model's half: what a family changes in the guide (deviations, options, hash seed).

A family is one script family of the two guides (catalog.Scenario.family). Its full object lives in
``k3lab.render.families`` (engine scripts, MemCache files, launcher, proxy, gates); those classes extend
the ones here. This half sits in the model layer because ``catalog.option_applies`` and
``deviations.for_scenario`` need it and the model must not import render (one-way layers).
It does not import the catalog (the catalog imports it): scenarios are typed by the few fields used.
"""
from __future__ import annotations

from typing import ClassVar, Protocol


class ScenarioLike(Protocol):
    """The catalog.Scenario fields a family reads."""

    @property
    def family(self) -> str: ...
    @property
    def pool(self) -> str: ...
    @property
    def params(self) -> dict[str, object]: ...
    @property
    def roles(self) -> dict[str, int]: ...


def dev(id: str, scope: str, what: str, why: str) -> dict[str, str]:
    return {"id": id, "scope": scope, "what": what, "why": why}


HASH_SEED = dev("hash-seed", "seed", "launch.sh exports PYTHONHASHSEED=0 where the guide's template sets none",
                "engines that transfer KV must hash prefixes identically; the guide sets it on the other role only "
                "or nowhere")
METASERVICE_HOST = dev("metaservice-host", "kit", "the MetaService runs on its own node 'meta' by default",
                       "the guide allows a separate MetaService host; the inventory can place it on any node")


def parsers_on(opts: dict[str, str]) -> bool:
    return opts.get("parsers", "on") == "on"


class FamilyModel:
    """Defaults: the guide's templates as written, no family-specific deviation."""

    name: ClassVar[str]
    parsers_option: ClassVar[bool] = False  # -o parsers adds parser flags the guide's templates omit

    def hash_seed(self, sc: ScenarioLike, role: str) -> bool:
        """Engines that transfer KV but whose guide template sets no PYTHONHASHSEED."""
        return False

    def deviations(self, sc: ScenarioLike, opts: dict[str, str]) -> list[dict[str, str]]:
        """This family's departures from its guide, in the order the plan lists them."""
        return self.pool_deviations(sc)

    def pool_deviations(self, sc: ScenarioLike) -> list[dict[str, str]]:
        return [dict(METASERVICE_HOST)] if sc.pool != "none" else []


class K3MixedModel(FamilyModel):
    name = "k3_mixed"


class K3A2Model(FamilyModel):
    name = "k3_a2"


class K3PdModel(FamilyModel):
    name = "k3_pd"
    parsers_option = True

    def hash_seed(self, sc: ScenarioLike, role: str) -> bool:
        return role == "decode"

    def deviations(self, sc: ScenarioLike, opts: dict[str, str]) -> list[dict[str, str]]:
        out = [
            dev("k3-pp-size", "seed", "drops --pp-size 1 from the launch_online_dp.py command (K3 §5.1.2.3)",
                "the real launch_online_dp.py has no --pp-size option and exits with 'unrecognized arguments'"),
            dev("k3-mmc-local", "seed", "mmc-local.conf for the Prefill engine clients uses the K3.1 Pro A3 reference "
                "keys with dram.size = 1GB", "K3 §5.1.2.1 only says to adapt the package examples; with no standalone "
                "providers the engine clients are the only pool members, so they must contribute DRAM"),
            dev("k3-metaservice-host", "kit", "the MetaService runs on its own node 'meta' by default",
                "K3 §5.1.2.1 does not say where; any node works and the inventory can place it"),
        ]
        if parsers_on(opts):
            out.append(dev("k3-pd-parsers", "seed", "adds --enable-auto-tool-choice --reasoning-parser kimi_k3 "
                           "--tool-call-parser kimi_k3 to both PD templates",
                           "K3 §10 says all three are required for reasoning and tool calling, but the §5.1.2 "
                           "templates omit them: without them reasoning markers leak into content and tool_choice "
                           "auto gets HTTP 400 (option parsers=off renders the templates as written)"))
        out.append(dev("k3-proxy", "seed", "the proxy registers all eight P and eight D engine APIs",
                       "K3 §5.1.2.3 defers the proxy to the Mooncake PD tutorial, which registers every engine API"))
        return [*out, dict(HASH_SEED)]

    def pool_deviations(self, sc: ScenarioLike) -> list[dict[str, str]]:
        return []  # k3-metaservice-host above says it with the K3 guide's reason


class K31A3Model(FamilyModel):
    name = "k31_a3"

    def deviations(self, sc: ScenarioLike, opts: dict[str, str]) -> list[dict[str, str]]:
        out = []
        if "draft" in opts:
            out.append(dev("a3-dspark-option", "seed", "DSpark3 --speculative-config reconstructed from the Key PD "
                           "Settings table and §5.3.5 (draft TP 4/16, 3 tokens, bfloat16 draft cache, eager on "
                           "Prefill only)", "the 'Add the following option' text of §5.1.1 is missing from the guide"))
        return out + self.pool_deviations(sc)


class K31A3PooledModel(FamilyModel):
    name = "k31_a3_pooled"

    def deviations(self, sc: ScenarioLike, opts: dict[str, str]) -> list[dict[str, str]]:
        return [dev("a3-pooled-kv-ports", "seed", "Mooncake kv_port 36000/36200 instead of the reference 33100/33500",
                    "33100 and 33500 lie inside the Mooncake transfer-engine range [20000, 36000) of a 16-device A3 "
                    "node"), *self.pool_deviations(sc)]


class K31A5Model(FamilyModel):
    name = "k31_a5"
    parsers_option = True

    def hash_seed(self, sc: ScenarioLike, role: str) -> bool:
        return not sc.params.get("pooled")

    def deviations(self, sc: ScenarioLike, opts: dict[str, str]) -> list[dict[str, str]]:
        out = [dict(HASH_SEED)] if self.hash_seed(sc, "decode") else []
        if parsers_on(opts):
            out.append(dev("a5-parsers", "seed", "adds --enable-auto-tool-choice --reasoning-parser kimi_k3 "
                           "--tool-call-parser kimi_k3", "the 950DT templates set only --tokenizer-mode; §5.1.1 and "
                           "§10 say to configure the parsers together for reasoning and tool calling (option "
                           "parsers=off renders the bare template)"))
        out.append(dev("a5-engine-id", "kit", "ENGINE_ID is 'prefill' on every P node (one PP engine) and "
                       "'decode<rank>' on each D node (inventory engine_id overrides)",
                       "the guide asks for a unique <PREFILL_ENGINE_ID>/<DECODE_ENGINE_ID> per engine; the four P "
                       "nodes form one engine, each D node is its own"))
        if sc.params.get("pooled"):
            out.append(dev("a5-mmc-protocol", "seed", "950DT client configs use protocol device_sdma like the A3 "
                           "reference", "§5.3.2 gives no 950DT protocol; set the one your fabric supports "
                           "(device_urma/device_uboe)"))
        return out + self.pool_deviations(sc)


MODELS: dict[str, FamilyModel] = {f.name: f for f in (K3MixedModel(), K3A2Model(), K3PdModel(), K31A3Model(),
                                                     K31A3PooledModel(), K31A5Model())}


def model_of(sc: ScenarioLike) -> FamilyModel:
    return MODELS[sc.family]
