"""The plan: the machine-readable form of a rendered scenario (``plan.json``).

Everything downstream reads the plan, never the catalog: preflight checks it, the launcher
executes it stage by stage, and the conformance suite takes its expected values from it.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Literal, Self, cast, overload

from pydantic import BaseModel, ConfigDict, Field
from pydantic_core import PydanticUndefined

ProcessKind = Literal["metaservice", "provider", "engine", "launcher", "proxy"]


class _Model(BaseModel):
    """A plan part. The renderer builds plans from validated inventories; a plan read back from
    plan.json is validated (``Plan.model_validate_json``).

    Building the models' validators is what a ``k3lab render`` or ``preflight`` process would spend
    most of its own time on (it never reads a plan back), so the renderer's constructor checks the field
    names and leaves the values as given (``make``: pydantic's ``model_construct``), and the validators
    are built only on first validation (``defer_build``). ``tests/unit/model/test_plan.py`` validates every
    rendered plan.
    """

    model_config = ConfigDict(extra="forbid", defer_build=True)

    @classmethod
    def make(cls, **data: object) -> Self:
        """The renderer's constructor: checks the field names, leaves the values as given."""
        values, missing = {}, []
        for name, field in cls.model_fields.items():
            if name in data:
                values[name] = data[name]
            elif field.default_factory is not None:  # called here: pydantic inspects its signature, ~50 us a call
                values[name] = cast(Callable[[], object], field.default_factory)()  # no-argument factories only
            elif field.default is not PydanticUndefined:  # plain defaults are immutable (tests/unit/model/test_plan.py)
                values[name] = field.default
            else:
                missing.append(name)
        unknown = data.keys() - values.keys()
        if unknown or missing:
            raise TypeError(f"{cls.__name__}: unknown fields {sorted(unknown)}, missing {sorted(missing)}")
        return cls.model_construct(set(data), **values)


DP_RPC_PURPOSE = "DP RPC (--data-parallel-rpc-port)"


class PortUse(_Model):
    port: int
    last: int | None = Field(None, description="end of a port range, inclusive")
    purpose: str
    listens: bool = Field(True, description="the process binds it (False: a range it may pick from)")

    @property
    def startup_only(self) -> bool:
        """Bound during start-up only: vLLM closes the DP RPC (handshake) port once the engines have
        handshaken, so a healthy deployment does not listen on it (preflight still needs it free)."""
        return self.purpose == DP_RPC_PURPOSE

    @property
    def span(self) -> tuple[int, int]:
        return self.port, self.last if self.last is not None else self.port


def _int(value: str | None, default: int | None = None) -> int | None:
    try:
        return int(value) if value is not None else default
    except ValueError:
        return default  # a malformed value reads as unset: the preflight check of that flag names it


def _json_object(value: str | None) -> dict:
    import json

    try:
        doc = json.loads(value) if value else {}
    except ValueError:
        return {}
    return doc if isinstance(doc, dict) else {}


class Topology(_Model):
    """An engine's parallelism, ranks, KV transfer and speculative settings, as fields of the plan.

    Recorded once by the renderer, from the command it has just built (:meth:`of`); preflight, the
    renderer's port arithmetic and the suite read these fields, never the argv again."""

    model: str | None = Field(None, description="the model path vllm serve is given")
    served_model_name: str | None = None
    max_model_len: int | None = None
    port: int | None = None
    tensor_parallel_size: int = 1
    pipeline_parallel_size: int = 1
    prefill_context_parallel_size: int = 1
    decode_context_parallel_size: int = 1
    data_parallel_size: int = 1
    data_parallel_size_local: int | None = None
    data_parallel_start_rank: int | None = None
    data_parallel_rank: int | None = None
    data_parallel_address: str | None = None
    data_parallel_rpc_port: int | None = None
    nnodes: int | None = None
    node_rank: int | None = None
    master_addr: str | None = None
    master_port: int | None = None
    headless: bool = False
    kv_transfer_config: dict = Field(default_factory=dict, description="--kv-transfer-config ({} if absent or "
                                                                         "not a JSON object)")
    speculative_config: dict = Field(default_factory=dict)
    additional_config: dict = Field(default_factory=dict)

    @classmethod
    def of(cls, argv: list[str]) -> Topology:
        """The fields of a ``vllm serve`` command line (its options as vLLM spells them)."""
        def i(name: str, default: int | None = None) -> int | None:
            return _int(flag(argv, name), default)

        return cls.make(
            model=argv[2] if len(argv) > 2 and argv[1:2] == ["serve"] else None,
            served_model_name=flag(argv, "--served-model-name"), max_model_len=i("--max-model-len"),
            port=i("--port"), tensor_parallel_size=i("--tensor-parallel-size", 1),
            pipeline_parallel_size=i("--pipeline-parallel-size", 1),
            prefill_context_parallel_size=i("--prefill-context-parallel-size", 1),
            decode_context_parallel_size=i("--decode-context-parallel-size", 1),
            data_parallel_size=i("--data-parallel-size", 1), data_parallel_size_local=i("--data-parallel-size-local"),
            data_parallel_start_rank=i("--data-parallel-start-rank"), data_parallel_rank=i("--data-parallel-rank"),
            data_parallel_address=flag(argv, "--data-parallel-address"),
            data_parallel_rpc_port=i("--data-parallel-rpc-port"), nnodes=i("--nnodes"), node_rank=i("--node-rank"),
            master_addr=flag(argv, "--master-addr"), master_port=i("--master-port"), headless="--headless" in argv,
            kv_transfer_config=_json_object(flag(argv, "--kv-transfer-config")),
            speculative_config=_json_object(flag(argv, "--speculative-config")),
            additional_config=_json_object(flag(argv, "--additional-config")))

    def kv_connectors(self) -> list[dict]:
        """The KV connectors: the one configured, or each child of a MultiConnector."""
        kv = self.kv_transfer_config
        if not kv:
            return []
        if kv.get("kv_connector") == "MultiConnector":
            children = (kv.get("kv_connector_extra_config") or {}).get("connectors") or []
            return [c for c in children if isinstance(c, dict)]
        return [kv]


class Process(_Model):
    id: str
    node: str
    kind: ProcessKind
    script: str | None = Field(None, description="file inside the container that the kit runs with bash")
    cwd: str
    env: dict[str, str] = Field(description="resolved environment the program receives (from its scripts)")
    unset: list[str] = Field(default_factory=list, description="variables the scripts unset")
    sourced: list[str] = Field(default_factory=list)
    argv: list[str] = Field(description="resolved argv the program finally receives")
    positional: list[str] = Field(default_factory=list, description="$1..$7 when started by launch_online_dp.py")
    ports: list[PortUse] = Field(default_factory=list)
    api: str | None = Field(None, description="base URL when the process serves HTTP")
    headless: bool = False
    dp_rank: int | None = None
    pp_rank: int | None = None
    devices: list[int] = Field(default_factory=list)
    topology: Topology | None = Field(None, description="engines: what their command sets up (Topology)")
    log: str
    children: list["Process"] = Field(default_factory=list)


class Mount(_Model):
    source: str
    target: str
    read_only: bool = False


class Container(_Model):
    name: str
    image: str
    shm_size: str
    privileged: bool
    network_mode: str
    devices: list[str]
    mounts: list[Mount]
    command: list[str]
    labels: dict[str, str] = Field(default_factory=dict)


class Artefact(_Model):
    name: str = Field(description="artefact name in the render output and golden (e.g. run_dp_template.sh)")
    path: str = Field(description="where it lives inside the container")
    mode: int = 0o644


class NodePlan(_Model):
    name: str
    role: str
    rank: int
    address: str
    nic: str
    endpoint: str
    platform: str
    device_count: int
    container: Container
    artefacts: list[Artefact]
    processes: list[Process]

    def all_processes(self) -> list[Process]:
        out = []
        for proc in self.processes:
            out.append(proc)
            out.extend(proc.children)
        return out


class Gate(_Model):
    kind: Literal["tcp", "http", "log", "metaservice_capacity", "proxy_instances"]
    node: str
    target: str = Field(description="host:port, URL or the log line awaited")
    process: str | None = None
    expect: int | None = None
    instances: dict[str, int] | None = Field(
        None, description="proxy_instances: /healthcheck prefill_instances and decode_instances to wait for")

    def describe(self) -> str:
        """What the gate waits for, in words (bring-up progress, gate failures and the runbook say the same)."""
        if self.kind == "tcp":
            return f"{self.target} to accept connections"
        if self.kind == "http":
            return f"{self.target} to answer 200"
        if self.kind == "log":
            return f"'{self.target}' in the log of {self.process}"
        if self.kind == "metaservice_capacity":
            return f"{self.target} to report {self.expect} bytes of DRAM"
        return f"{self.target} to answer status ok with " + ", ".join(
            f"{n} {role} instance(s)" for role, n in (self.instances or {}).items())


class Stage(_Model):
    name: str
    processes: list[str]
    gates: list[Gate]
    timeout_s: float


class ApiEndpoint(_Model):
    node: str
    url: str
    role: str
    dp_ranks: list[int]


class MetaExpect(_Model):
    url: str
    metrics_url: str
    segments: int | None = Field(None, description="expected DRAM segments; None where the guide says to observe")
    segment_bytes: int | None = None
    total_bytes: int | None = None


class Expect(_Model):
    served_name: str
    model_path: str
    max_model_len: int
    apis: list[ApiEndpoint]
    entrypoint: str = Field(description="where clients send requests: the proxy on PD, node 0 on mixed")
    proxy: str | None = None
    proxy_instances: dict[str, int] = Field(
        default_factory=dict, description="role -> engine APIs the PD proxy must count in /healthcheck")
    dp_groups: dict[str, dict[int, str]] = Field(description="group -> DP rank -> node")
    pp_groups: dict[str, dict[int, str]] = Field(default_factory=dict)
    headless: list[str]
    metaservice: MetaExpect | None = None
    ports: dict[str, list[PortUse]] = Field(description="node -> ports its processes use")
    language_model_only: bool = False
    parsers: bool = True
    kv_connector: bool = False
    external_pool: bool = False
    dp_routing: bool = False


class Deviation(_Model):
    id: str
    scope: Literal["seed", "target", "kit"]
    what: str
    why: str


class Plan(_Model):
    scenario: str
    title: str
    seed: str
    section: str
    target: Literal["sim", "lab", "k8s"]
    platform: str
    options: dict[str, str]
    inventory: str
    nodes: list[NodePlan]
    stages: list[Stage]
    expect: Expect
    deviations: list[Deviation]

    def node(self, name: str) -> NodePlan:
        return next(n for n in self.nodes if n.name == name)

    def processes(self) -> list[Process]:
        return [p for n in self.nodes for p in n.all_processes()]


def jsonable(value: object) -> object:
    """``model_dump(mode="json")`` of a plan without building its serializers (see ``_Model``).

    Plans hold models, lists, dicts, strings, numbers, booleans and None; a float field given a
    whole number dumps as a float, as pydantic's does. ``tests/unit/model/test_plan.py`` compares the two.
    """
    if isinstance(value, BaseModel):
        fields = type(value).model_fields
        out = {}
        for name, info in fields.items():
            v = getattr(value, name)
            out[name] = float(v) if info.annotation is float and type(v) is int else jsonable(v)
        return out
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if isinstance(value, dict):
        return {k if isinstance(k, str) else str(k): jsonable(v) for k, v in value.items()}
    return value


@overload
def flag(argv: list[str], name: str) -> str | None: ...
@overload
def flag(argv: list[str], name: str, default: str) -> str: ...
@overload
def flag(argv: list[str], name: str, default: None) -> str | None: ...


def flag(argv: list[str], name: str, default: str | None = None) -> str | None:
    """The value of option ``name`` in ``argv`` (``--name value`` or ``--name=value``), else ``default``."""
    for i, arg in enumerate(argv):
        if arg == name and i + 1 < len(argv):
            return argv[i + 1]
        if arg.startswith(name + "="):
            return arg.split("=", 1)[1]
    return default
