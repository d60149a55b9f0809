"""The lab preflight's checks: ID, area, MUST statement and remedy (``k3lab preflight --list``, ``k3lab checks``).

Kept apart from ``k3lab.launch.labpreflight`` (which runs them and needs the Docker SDK and paramiko)
so that listing the checks imports neither. Each is a :class:`k3lab.model.checks.CheckInfo` of stage ``lab``.
"""
from __future__ import annotations

from k3lab.model.checks import CheckInfo, Stage


def live_check(stage: Stage, id: str, area: str, must: str, remedy: str) -> CheckInfo:
    """A check of a live stage (lab preflight, host stage): its findings are errors."""
    return CheckInfo(id=id, stage=stage, area=area, must=must, remedy=remedy, source=f"k3lab.preflight.{stage}checks")


def _lab(id: str, area: str, must: str, remedy: str) -> CheckInfo:
    return live_check("lab", id, area, must, remedy)


LIVE_CHECKS = [
    _lab("LPF-ENDPOINT", "endpoints", "Every node's Docker endpoint MUST answer, and an ssh:// endpoint's host key MUST "
              "already be in the known_hosts file the kit uses (never accepted blindly).",
              "start the Docker engine / sshd on the node; verify the host key fingerprint out of band and add it "
              "to the inventory's lab.known_hosts (or ~/.ssh/known_hosts)."),
    _lab("LPF-SSH-SHELL", "endpoints", "A command run over SSH on an ssh:// node MUST print nothing but its own output: "
              "docker over ssh:// runs docker system dial-stdio through root's shell and reads the engine's answers "
              "from its stdout (Debian's bash reads ~/.bashrc for every command sshd runs).",
              "make root's ~/.bashrc and /etc/bash.bashrc print nothing unless interactive: put "
              "'case $- in *i*) ;; *) return ;; esac' above any echo, banner or tool that prints."),
    _lab("LPF-IMAGE", "containers", "The planned image MUST be present on every node, or be pulled as --pull says "
              "(never|missing|always); the Docker API never pulls on create.",
              "docker pull (or docker load) the image on the node, or run with --pull missing."),
    _lab("LPF-MOUNT-SOURCE", "containers", "Every bind-mount source MUST exist on its node: the Docker API refuses a "
              "missing source where docker run -v would silently create an empty directory.",
              "create the path on the node (driver files, /etc/hccn.conf, the model directory), mount the shared "
              "filesystem an inventory mounts entry names (its source), or fix the inventory."),
    _lab("LPF-NAME", "containers", "The container name MUST be free on each node or belong to this run; a container the "
              "kit did not start is never touched.",
              "remove or rename the other container yourself (docker rm NAME on that node), or set "
              "container_name in the inventory."),
    _lab("LPF-PORTS", "ranks-ports", "The planned host ports MUST be free on each node (--net=host shares the host's ports).",
              "stop what listens there, or choose other ports in the inventory's ports section."),
    _lab("LPF-PROXY", "proxy-vars", "The kit host's proxy variables MUST NOT apply to deployment addresses: gates, evidence, "
              "checks and tcp:// Docker endpoints ignore them.",
              "nothing to do when this passes; the kit never routes deployment traffic through a proxy."),
]
BY_ID = {c.id: c for c in LIVE_CHECKS}


def catalogue() -> list[dict[str, str]]:
    return [{"id": c.id, "severity": c.severity, "must": c.must, "remedy": c.remedy} for c in LIVE_CHECKS]
