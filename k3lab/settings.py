"""The kit's settings: every environment variable it reads, typed and checked once, in one object.

The CLI reads them at its entry (``k3lab/cli/main.py``) and installs them with :func:`use`; everything
below asks :func:`current`. A process that is not the CLI (the conformance suite, a library caller)
gets them from its own environment on the first :func:`current`. A child process reads its own
environment, so code that sets a variable for a child passes it in the child's ``env`` (that is not a
read). Tests change a setting with :func:`patched`; ``tests/conftest.py`` resets them around each test.

This is the bottom layer: stdlib only, no pydantic (``k3lab list`` must start without it), and no
``k3lab.errors`` (which reads ``log_dir`` from here); a bad value raises :class:`SettingError`, a
``ValueError`` the CLI maps to exit 2 with one line naming the variable.
"""
from __future__ import annotations

import contextlib
import dataclasses
import ipaddress
import math
import os
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypedDict

ENVIRONMENT, DEFAULT = "environment", "default"


class SettingError(ValueError):
    """An environment variable of the kit holds a value it cannot use (exit 2)."""

    exit_code = 2


@dataclass(frozen=True)
class Setting:
    """One environment variable: its name, the field it fills, how to parse it, its default and meaning."""

    env: str
    name: str
    parse: Callable[[str], Any]
    default: Callable[[], Any]
    shown: str  # the default as the docs and ``k3lab env`` show it
    unit: str
    doc: str
    group: str


def _seconds(minimum: float, strict: bool) -> Callable[[str], float]:
    def parse(raw: str) -> float:
        try:
            value = float(raw)
        except ValueError:
            raise ValueError("not a number") from None
        if not math.isfinite(value) or value < minimum or (strict and value == minimum):
            raise ValueError(f"not a finite number {'>' if strict else '>='} {minimum:g}")
        return value
    return parse


def _path(raw: str) -> Path:
    if "\0" in raw:
        raise ValueError("a path holds no NUL byte")
    return Path(raw).expanduser()


def _text(raw: str) -> str:
    return raw


def _subnet(raw: str) -> str:
    try:
        net = ipaddress.IPv4Network(raw, strict=True)
    except ValueError as exc:
        raise ValueError(f"not an IPv4 network such as 172.28.0.0/24 ({exc})") from None
    if net.num_addresses < 8:
        raise ValueError("too small for a topology (at least 8 addresses)")
    return str(net)


def _seed(raw: str) -> int:
    if not raw.isdigit() or not raw.isascii():
        raise ValueError("not a whole number >= 0")
    return int(raw)


def _none() -> None:
    return None


_CACHE = Path.home() / ".cache" / "k3lab"
SETTINGS: tuple[Setting, ...] = (
    # for operators
    Setting("K3LAB_API_KEY", "api_key", _text, _none, "unset", "", "the engines' and the proxy's API key; "
            "redacted from logs, reports and the run directory (unset: the APIs are open)", "operators"),
    Setting("K3LAB_RUNS", "runs", _path, lambda: Path.cwd() / "runs", "./runs", "directory",
            "where run directories go", "operators"),
    Setting("K3LAB_RELEASES", "releases", _path, lambda: Path.cwd() / "releases", "./releases", "directory",
            "where `k3lab release` writes without --out", "operators"),
    Setting("K3LAB_CACHE", "cache", _path, lambda: _CACHE, "~/.cache/k3lab", "directory",
            "downloads of the real vllm-ascend proxy and launcher; the RUNBOOK template's compiled byte code", "operators"),
    Setting("K3LAB_LOG_DIR", "log_dir", _path, lambda: _CACHE / "logs", "~/.cache/k3lab/logs", "directory",
            "tracebacks of internal errors (exit 4)", "operators"),
    Setting("DOCKER_HOST", "docker_host", _text, _none, "unset", "URL",
            "the kit host's own engine, the simulator's (unset: the local socket)", "operators"),
    Setting("KUBECONFIG", "kubeconfig", _path, lambda: Path.home() / ".kube" / "config", "~/.kube/config", "file",
            "the k8s target's kubeconfig (one file; the inventory's k8s.context names the context)", "operators"),
    # deadlines of a lab run
    Setting("K3LAB_ANSWER_TIMEOUT", "answer_timeout_s", _seconds(0, True), lambda: 20.0, "20 s", "s",
            "SSH connect, banner, auth and channel open, and a host's first /_ping", "deadlines"),
    Setting("K3LAB_HOST_DEADLINE", "host_deadline_s", _seconds(0, True), lambda: 60.0, "60 s", "s",
            "evidence, versions, attach and status per host", "deadlines"),
    Setting("K3LAB_TEARDOWN_DEADLINE", "teardown_deadline_s", _seconds(0, True), lambda: 90.0, "90 s", "s",
            "teardown per host", "deadlines"),
    Setting("K3LAB_HOST_STAGE_DEADLINE", "host_stage_deadline_s", _seconds(0, True), lambda: 60.0, "60 s", "s",
            "the host stage per node", "deadlines"),
    Setting("K3LAB_SIM_GATE_TIMEOUT", "sim_gate_timeout_s", _seconds(0, True), lambda: 90.0, "90 s", "s",
            "the cap on a readiness gate on the sim target", "deadlines"),
    # the simulator and the emulated lab
    Setting("K3LAB_SIM_SUBNET", "sim_subnet", _subnet, lambda: "172.28.0.0/24", "172.28.0.0/24", "IPv4 network",
            "the sim's bridge network", "simulator"),
    Setting("K3LAB_SIM_DEVICE_SUBNET", "sim_device_subnet", _subnet, lambda: "172.29.0.0/16", "172.29.0.0/16",
            "IPv4 network", "the sim's simulated device network", "simulator"),
    Setting("K3SIM_LOAD_SECONDS", "sim_load_s", _seconds(0, False), lambda: 0.3, "0.3 s", "s",
            "the stand-in engines' model load", "simulator"),
    Setting("K3SIM_HCCS_PING_S", "hccs_ping_s", _seconds(0, False), lambda: 0.0, "0 s", "s",
            "the stand-in hccn_tool -hccs_ping's wait before it answers", "simulator"),
    Setting("K3LAB_EMU_DIR", "emu_dir", _path, lambda: Path("/var/lib/k3lab-emu"), "/var/lib/k3lab-emu",
            "directory", "the emulated lab's state", "simulator"),
    Setting("K3LAB_SAMPLE_SEED", "sample_seed", _seed, _none, "unset", "", "the rotation of the cross-node "
            "ping sample (unset: derived from the run id)", "simulator"),
    # the kit's own tests, and what the kit sets for its child processes
    Setting("K3LAB_ROUND_TRIPS", "round_trips", _path, _none, "unset", "directory",
            "where each host appends its exec round trips (nox -s bench)", "tests"),
    Setting("K3LAB_RUN_DIR", "run_dir", _path, _none, "unset", "directory",
            "the run directory the conformance suite checks (k3lab check sets it)", "children"),
    Setting("K3LAB_NODE_TOOLS_DIR", "node_tools_dir", _path, _none, "unset", "directory",
            "where the suite's xdist workers share each node's tool answers", "children"),
)
BY_ENV = {s.env: s for s in SETTINGS}
# the groups' headings, in the order of docs/environment.md's tables
GROUPS = {"operators": "For operators", "deadlines": "Deadlines of a lab run",
          "simulator": "The simulator and the emulated lab", "tests": "For the kit's own tests",
          "children": "Set by the kit for its own child processes"}


@dataclass(frozen=True)
class Settings:
    """Every setting's value; ``sources`` says, per field, whether the environment or the default gave it."""

    api_key: str | None
    runs: Path
    releases: Path
    cache: Path
    log_dir: Path
    docker_host: str | None
    kubeconfig: Path
    answer_timeout_s: float
    host_deadline_s: float
    teardown_deadline_s: float
    host_stage_deadline_s: float
    sim_gate_timeout_s: float
    sim_subnet: str
    sim_device_subnet: str
    sim_load_s: float
    hccs_ping_s: float
    emu_dir: Path
    sample_seed: int | None
    round_trips: Path | None
    run_dir: Path | None
    node_tools_dir: Path | None
    sources: Mapping[str, str] = field(default_factory=dict, compare=False)


def given(environ: Mapping[str, str]) -> dict[str, Any]:
    """The settings ``environ`` sets (field -> value), checked; other variables are not the kit's."""
    values: dict[str, Any] = {}
    for s in SETTINGS:
        raw = environ.get(s.env)
        if raw:  # an empty variable is unset, as the shell's ${VAR:-default}
            try:
                values[s.name] = s.parse(raw)
            except ValueError as exc:
                raise SettingError(f"environment variable {s.env}={raw!r}: {exc}") from None
    return values


def load(environ: Mapping[str, str] | None = None) -> Settings:
    """The settings from ``environ`` (default: this process's environment), defaults for the rest."""
    values = given(os.environ if environ is None else environ)
    sources = {s.name: ENVIRONMENT if s.name in values else DEFAULT for s in SETTINGS}
    return Settings(**{s.name: values[s.name] if s.name in values else s.default() for s in SETTINGS},
                    sources=sources)


# the settings read (or installed), the test overrides on top, and the two merged (what current() returns)
_base: Settings | None = None
_overrides: dict[str, Any] = {}
_merged: Settings | None = None


def use(settings: Settings) -> Settings:
    """Install ``settings`` as the process's (the CLI's entry does it once); :func:`patched` stays on top."""
    global _base, _merged
    _base, _merged = settings, None
    return current()


def current() -> Settings:
    """The process's settings, read from its environment on first use when nothing installed them."""
    global _base, _merged
    if _merged is None:
        if _base is None:
            _base = load()
        _merged = _base
        if _overrides:
            sources = {**_base.sources, **dict.fromkeys(_overrides, ENVIRONMENT)}
            _merged = dataclasses.replace(_base, **_overrides, sources=sources)
    return _merged


def reset() -> None:
    """Forget the settings and any override; the next :func:`current` reads the environment (tests)."""
    global _base, _merged, _overrides
    _base, _merged, _overrides = None, None, {}


@contextlib.contextmanager
def patched(**changes: Any) -> Iterator[Settings]:
    """The settings with ``changes`` (field names) for the ``with`` block, even across a CLI entry's :func:`use`."""
    global _overrides, _merged
    unknown = set(changes) - {f.name for f in dataclasses.fields(Settings)} - {"sources"}
    if unknown or "sources" in changes:
        raise TypeError(f"no such setting: {sorted(unknown | ({'sources'} & set(changes)))}")
    before = _overrides
    _overrides, _merged = {**before, **changes}, None
    try:
        yield current()
    finally:
        _overrides, _merged = before, None


class SettingRow(TypedDict):
    """One setting as ``k3lab env`` shows it."""

    variable: str  # the environment variable
    value: str | None  # as set (the API key redacted); None: unset
    source: str  # ENVIRONMENT or DEFAULT
    default: str  # as the docs show it
    unit: str
    group: str  # a key of GROUPS
    doc: str


def table(settings: Settings | None = None) -> list[SettingRow]:
    """One row per setting: variable, value (the API key redacted), source, default, unit, meaning."""
    s = settings or current()
    rows = []
    for spec in SETTINGS:
        value = getattr(s, spec.name)
        if spec.name == "api_key" and value:
            value = "<redacted>"
        if isinstance(value, float):
            value = format(value, "g")  # 20, not 20.0: the unit says seconds
        rows.append(SettingRow(variable=spec.env, value=None if value is None else str(value),
                               source=s.sources.get(spec.name, DEFAULT), default=spec.shown, unit=spec.unit,
                               group=spec.group, doc=spec.doc))
    return rows
