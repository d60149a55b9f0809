"""Backend.exec answers with a CommandResult: a failure is read from it, never unpacked away."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

from k3lab.errors import CommandFailed, EnvError
from k3lab.launch.endpoints import CommandResult

ROOT = Path(__file__).resolve().parents[3]


def test_ok_result_checks_to_its_output():
    res = CommandResult("cat /etc/hccn.conf", 0, "address_0=10.0.0.1\n", host="p0")
    assert res.ok and res.check() == "address_0=10.0.0.1\n"


@pytest.mark.parametrize("rc, extra", [(1, ""), (124, " (timed out)")])
def test_failed_result_names_node_command_and_output(rc, extra):
    res = CommandResult("tail -n 20 /root/vllm.log", rc, "", "tail: cannot open '/root/vllm.log'\n", host="d2")
    with pytest.raises(CommandFailed) as err:
        res.check()
    assert str(err.value) == (f"d2: 'tail -n 20 /root/vllm.log' exited {rc}{extra}: "
                              "tail: cannot open '/root/vllm.log'")
    assert isinstance(err.value, EnvError) and err.value.exit_code == EnvError.exit_code


def test_a_result_cannot_be_unpacked_as_the_old_tuple():
    with pytest.raises(TypeError):
        code, out = CommandResult("true", 1, "", host="p0")  # noqa: F841


def test_no_kit_module_unpacks_backend_exec():
    """Every `x, y = <...>.exec(...)` assignment is gone from the kit (the tuple API it relied on is)."""
    offenders = []
    for path in [*ROOT.joinpath("k3lab").rglob("*.py"), *ROOT.joinpath("conformance").rglob("*.py")]:
        for node in ast.walk(ast.parse(path.read_text())):
            if (isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Tuple)
                    and isinstance(node.value, ast.Call) and isinstance(node.value.func, ast.Attribute)
                    and node.value.func.attr == "exec"):
                offenders.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert not offenders, f"tuple-unpacked exec results: {offenders}"
