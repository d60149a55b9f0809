"""RUNBOOK.md: how to run a render's scripts by hand, node by node, in the order ``k3lab up`` runs them.

Everything comes from the :class:`~k3lab.model.plan.Plan`: its containers, artefacts, stages and gates
are the data the bring-up engine (k3lab.launch.lifecycle) walks, so the runbook and ``k3lab up``
cannot disagree about the order or about what "ready" means. Each gate gets the command an operator
types to check it by hand (curl for HTTP, bash's /dev/tcp for a bare port, grep for a log line).
Step 0 lists every check of the host and hardware stages with its commands (:mod:`k3lab.render.stepzero`);
each start command is one line under a marker, which :func:`start_commands` finds.
"""
from __future__ import annotations

import contextlib
import functools
import posixpath
import re
import shlex
from dataclasses import dataclass
from typing import Any

from k3lab import paths, settings
from k3lab.model import targetkinds
from k3lab.model.plan import Gate, NodePlan, Plan, Process, Stage
from k3lab.render import stepzero

NAME = "RUNBOOK.md"
# the HTML comment before each start command's fenced block (invisible in rendered Markdown): what
# start_commands() finds, so a script runs the RUNBOOK's own commands, never a copy of them
START_MARKER = "k3lab-start"
_START = re.compile(rf"^[ \t]*<!-- {START_MARKER} stage=(\d+) node=(\S+) process=(\S+) -->\n"
                    r"[ \t]*```[^\n]*\n[ \t]*(.+)\n[ \t]*```[ \t]*$", re.M)
STAGE_TITLES = {"host": "Host stage (before step 1)",
                "hardware": "Hardware stage (npu-smi and hccn_tool, the guide's §3.2; `k3lab up` runs it after "
                            "step 1, in the containers, on the host's own tools they mount)"}

_TEMPLATE = """\
# Runbook: {{ plan.scenario }} ({{ plan.section }})

{{ plan.title }}. Rendered for **{{ target_words }}** (inventory `{{ plan.inventory }}`).
{% if kind.manifests %}

> The pods of `k8s/` run these scripts; the last section says how to apply them with kubectl. The Docker
> steps below are what the pods do for each node, and what `k3lab up` does on a lab.
{% endif %}
{% if kind.simulated %}

> These artefacts were rendered for the **simulator**: the addresses ({{ addresses }}) and NIC
> `{{ nics }}` belong to the simulator's private bridge and do not exist in a lab. `k3lab up {{ plan.scenario }}`
> runs them in containers on this machine. For real nodes, render from a lab inventory:
> `k3lab init {{ plan.scenario }} --out lab.yaml`, fill it in, then
> `k3lab render {{ plan.scenario }} -i lab.yaml --out DIR`.
{% endif %}

This is what `k3lab up` does, written out for an operator who runs the scripts by hand. The steps and
readiness gates come from `plan.json` (`stages`), the same data `k3lab up` follows. Run the Docker
commands from this directory; `DOCKER_HOST` points the Docker CLI at the node's endpoint (it reaches
`ssh://` and `tcp://` endpoints itself; on the node itself leave it unset). First check the plan:
`k3lab preflight {{ plan.scenario }}{{ inventory_arg }}`.
{% if key_note %}

If the deployment requires an API key, export it in your shell as `VLLM_API_KEY`, pass it to each
engine's start command as `-e VLLM_API_KEY="$VLLM_API_KEY"` and to the proxy's as
`-e OPENAI_API_KEY="$VLLM_API_KEY"` (after `docker exec -d`; the kit passes `K3LAB_API_KEY` that way),
and add `-H "Authorization: Bearer $VLLM_API_KEY"` to the `/v1/` checks below.
{% endif %}

## Nodes

| node | role | rank | address | NIC | endpoint | container |
|---|---|---|---|---|---|---|
{% for n in plan.nodes %}
| {{ n.name }} | {{ n.role }} | {{ n.rank }} | {{ n.address }} | {{ n.nic }} | `{{ n.endpoint }}` | `{{ n.container.name }}` |
{% endfor %}

## Step 0: prove every node (the host and hardware stages)

`k3lab up` starts nothing until every node has passed its host stage (before any container) and its
hardware stage (after the containers exist, before any engine: the NPU and HCCN checks of the
guide's §3.2). These are the same checks, each with its id (`k3lab checks`), what it requires and
the commands that show it on a node. Run them as root in a shell on each node's host (the check
`HST-REACH` from this machine); where the nodes differ, the commands are given per node.
{% if kind.simulated %}

On the simulator the stand-in image answers `npu-smi` and `hccn_tool` inside the containers, not on
this machine: `k3lab up` runs these checks there.
{% endif %}
{% for stage_name, checks in step0 %}

### {{ stage_name }}
{% for c in checks %}

#### `{{ c.info.id }}`

{{ c.info.must }}
{% if not c.declared %}

No manual command is declared for this check; `k3lab up` runs it.
{% endif %}
{% for g in c.groups %}

On {{ c.where(g, node_names) }}:

```
{% for line in g.lines %}
{{ line }}
{% endfor %}
```
{% endfor %}
{% if c.na %}

Not applicable on {{ c.na | join(", ") }}.
{% endif %}

If not: {{ c.info.remedy }}
{% endfor %}
{% endfor %}

## Step 1: containers (every node)

The guide's `docker run` (detached: the kit runs the processes with `docker exec`; deviation
`docker-detached`), then the node's scripts copied to where the plan puts them inside the container.
Image: `{{ images }}` (present on every node, or `docker pull` it first).

{% for n in nodes %}
### {{ n.plan.name }}

```
{% if n.docker_host %}
{{ n.docker_host }}
{% endif %}
bash {{ n.plan.name }}/docker_run.sh
{% if n.dirs %}
docker exec {{ n.container }} mkdir -p {{ n.dirs }}
{% endif %}
{% for src, dst in n.copies %}
docker cp {{ src }} {{ n.container }}:{{ dst }}
{% endfor %}
```

{% endfor %}
## Step 2: start the processes, stage by stage

Start every process of a stage, then wait until each of its gates passes before the next stage
(`k3lab up` allows a stage the timeout shown). Each start is one command, run from this directory
like step 1: `docker exec -d` starts the script in the background, with its log where the checks
read it, in an interactive shell (`bash -ic`: it reads `~/.bashrc`, where the image sets up CANN, as
the guide's `docker exec -it CONTAINER bash` does). The `{{ start_marker }}` comment above each
block names its stage, node and process, for scripts that extract the commands.

{% for st in stages %}
### Stage {{ loop.index }}: {{ st.name }} (timeout {{ st.timeout }} s)

{% set stage_no = loop.index %}
{% for s in st.starts %}
{{ loop.index }}. On **{{ s.node }}** ({{ s.proc.id }}{% if s.children %}; it starts {{ s.children }}{% endif %}):

   <!-- {{ start_marker }} stage={{ stage_no }} node={{ s.node }} process={{ s.proc.id }} -->
   ```
   {{ s.command }}
   ```
{% endfor %}

Wait for:

{% for g in st.gates %}
- {{ g.node }}: {{ g.what }}
  `{{ g.check }}`
{% endfor %}

{% endfor %}
## Step 3: check, then tear down

`k3lab check {{ plan.scenario }}{{ inventory_arg }}` runs the conformance suite against the deployment
you started (it starts and stops nothing). Tear down on every node:

```
{% for n in nodes %}
{% if n.docker_host %}{{ n.docker_host }}; {% endif %}docker rm -f {{ n.container }}
{% endfor %}
```
{% if plan.deviations %}

## Deviations from the guide in these artefacts

{% for d in plan.deviations %}
- `{{ d.id }}` ({{ d.scope }}): {{ d.what }}. Why: {{ d.why }}.
{% endfor %}
{% endif %}
"""


@dataclass
class _NodeSteps:
    plan: NodePlan
    docker_host: str
    container: str
    dirs: str
    copies: list[tuple[str, str]]


def _docker_host(node: NodePlan) -> str:
    """``export DOCKER_HOST=...`` for a remote endpoint; nothing for the local engine."""
    ep = node.endpoint
    return "" if ep.startswith("unix://") else f"export DOCKER_HOST={shlex.quote(ep)}"


def _node_steps(node: NodePlan) -> _NodeSteps:
    inside = [a for a in node.artefacts if a.path.startswith("/")]
    dirs = sorted({posixpath.dirname(a.path) for a in inside}
                  | {posixpath.dirname(p.log) for p in node.all_processes()})
    return _NodeSteps(plan=node, docker_host=_docker_host(node), container=shlex.quote(node.container.name),
                      dirs=" ".join(shlex.quote(d) for d in dirs),
                      copies=[(shlex.quote(f"{node.name}/{a.name}"), shlex.quote(a.path)) for a in inside])


def manual_check(gate: Gate, log_of: dict[str, str], docker_of: dict[str, str]) -> str:
    """The command an operator runs to see whether ``gate`` passes, as the kit's probe decides it.

    Each probe ends by itself (``--max-time``, ``timeout``): a node that accepts and never answers must not
    hang the operator's loop, as the kit's own probes have deadlines."""
    if gate.kind == "tcp":  # curl cannot test a bare port; bash can, on any node
        host, port = gate.target.rsplit(":", 1)
        return f"timeout 2 bash -c '</dev/tcp/{host}/{port}' && echo open"
    if gate.kind == "http":
        return f"curl -sS --max-time 5 -o /dev/null -w '%{{http_code}}\\n' {shlex.quote(gate.target)}   # 200"
    if gate.kind == "log":
        log = log_of.get(gate.process or "", "")
        return f"{docker_of[gate.node]} grep -F {shlex.quote(gate.target)} {shlex.quote(log)}"
    if gate.kind == "metaservice_capacity":
        return (f"curl -sS --max-time 5 {shlex.quote(gate.target)} | grep '^memcache_total_capacity_bytes.*dram'"
                f"   # sums to {gate.expect}")
    want = ", ".join(f'"{role}_instances": {n}' for role, n in (gate.instances or {}).items())
    return f"curl -sS --max-time 5 {shlex.quote(gate.target)}   # \"status\": \"ok\", {want}"


def start_command(proc: Process, node: NodePlan) -> str:
    """One line that starts ``proc`` on its node from the operator's machine: scriptable across nodes.

    ``bash -ic``: the interactive shell reads ~/.bashrc, where the images set up CANN (LD_LIBRARY_PATH,
    set_env.sh), as the guide's ``docker exec -it ... bash`` does and ``k3lab up`` reproduces
    (k3lab.launch.lifecycle.shell_env); a login shell (-l) reads ~/.profile instead, and the stock
    Debian/Ubuntu ~/.bashrc returns early in a shell that is not interactive. ``exec``: the script replaces the shell, so its log is the process's."""
    inner = f"cd {shlex.quote(proc.cwd)} && exec bash {shlex.quote(proc.script or '')} >> {shlex.quote(proc.log)} 2>&1"
    host = _docker_host(node).removeprefix("export ")
    return " ".join(filter(None, [host, "docker exec -d", shlex.quote(node.container.name), "bash -ic",
                                  shlex.quote(inner)]))


def _start(proc: Process, node: NodePlan) -> dict[str, object]:
    return {"node": node.name, "proc": proc, "command": start_command(proc, node),
            "children": ", ".join(c.id for c in proc.children)}


def _stage(stage: Stage, plan: Plan, log_of: dict[str, str], docker_of: dict[str, str]) -> dict[str, object]:
    procs = {p.id: p for p in plan.processes()}
    starts = [_start(procs[pid], plan.node(procs[pid].node)) for pid in stage.processes]
    gates = [{"node": g.node, "what": g.describe(), "check": manual_check(g, log_of, docker_of)} for g in stage.gates]
    return {"name": stage.name, "timeout": f"{stage.timeout_s:.0f}", "starts": starts, "gates": gates}


def text(plan: Plan) -> str:
    """The runbook of ``plan`` (jinja2, imported in _template: only ``k3lab render`` writes a runbook)."""
    nodes = [_node_steps(n) for n in plan.nodes]
    procs = {p.id: p for p in plan.processes()}
    log_of = {pid: p.log for pid, p in procs.items()}
    docker_of = {s.plan.name: " ".join(filter(None, [s.docker_host.removeprefix("export "), "docker exec",
                                                       s.container])) for s in nodes}
    stages = [_stage(stage, plan, log_of, docker_of) for stage in plan.stages]
    step0 = [(STAGE_TITLES[name], checks) for name, checks in stepzero.steps(plan).items()]
    kind = targetkinds.kind(plan.target)
    out = _template().render(
        plan=plan, kind=kind, nodes=nodes, stages=stages, target_words=kind.description, step0=step0,
        node_names=[n.name for n in plan.nodes], start_marker=START_MARKER,
        inventory_arg=_inventory_arg(plan) if kind.needs_inventory else "",
        addresses=", ".join(n.address for n in plan.nodes), nics=", ".join(sorted({n.nic for n in plan.nodes})),
        images=", ".join(sorted({n.container.image for n in plan.nodes})),
        key_note=any(p.kind in ("engine", "launcher", "proxy") for p in procs.values()))
    return out.rstrip("\n") + "\n"


@functools.cache
def _template() -> Any:
    """The RUNBOOK template, compiled once per process, its byte code cached under $K3LAB_CACHE/jinja across
    processes: compiling it was a tenth of a ``k3lab render`` (issue #31). jinja checks the cached code against
    the template's checksum, so an edited template recompiles; a cache that cannot be written costs a compile."""
    import jinja2

    class QuietCache(jinja2.FileSystemBytecodeCache):
        def dump_bytecode(self, bucket: Any) -> None:
            with contextlib.suppress(OSError):
                super().dump_bytecode(bucket)

    cache = None
    folder = settings.current().cache / "jinja"
    with contextlib.suppress(OSError):
        folder.mkdir(parents=True, exist_ok=True)
        cache = QuietCache(str(folder))
    env = jinja2.Environment(loader=jinja2.DictLoader({NAME: _TEMPLATE}), bytecode_cache=cache,
                             undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True,
                             keep_trailing_newline=True, auto_reload=False)
    return env.get_template(NAME)


@dataclass(frozen=True)
class StartCommand:
    """One process's start command as the RUNBOOK gives it."""

    stage: int  # 1-based, as the RUNBOOK numbers the stages
    node: str
    process: str
    command: str


def start_commands(text: str) -> list[StartCommand]:
    """Every start command of a RUNBOOK's step 2, in its order (stage by stage), found by its marker."""
    return [StartCommand(int(m.group(1)), m.group(2), m.group(3), m.group(4).strip()) for m in _START.finditer(text)]


def _inventory_arg(plan: Plan) -> str:
    """``-i FILE`` as the render read it; an inventory read from standard input is piped in again."""
    if plan.inventory == paths.STDIN_NAME:
        return f" -i {paths.STDIN} < lab.yaml"
    return f" -i {shlex.quote(plan.inventory)}"
