"""Never silent (#32, pass 16): failures printed with no error level, or after a readiness line, are first errors;
and host-oom's meaning does not take an RDMA registration's ENOMEM (the locked-memory ulimit). Every failure line
is BUILT from the upstream statement named beside it (none is a real log line)."""
from __future__ import annotations

import pytest

from k3lab.diagnosis.engine import diagnose
from tests.unit.diagnosis.onelog import assert_clean, diagnose_text
from tests.unit.diagnosis.test_meaning_reach import _without

# pygptj/model.py (pygpt4all's GPT-J binding): raise Exception(f"File {model_path} not found!"); Python prints a bare
# Exception's line with no class prefix (an excerpt that starts at the frames, below the Traceback header)
BARE_EXCEPTION = ('  File "/srv/app/pygptj/model.py", line 52, in __init__\n'
                  '    raise Exception(f"File {model_path} not found!")\n'
                  "Exception: File ./models/ggml-model.bin not found!\n")
# uvicorn's startup lines, then asyncio base_events.create_server's OSError(err.errno, "error while attempting to bind
# on address %r: %s") that uvicorn's Server.startup logs with logger.error(exc) before it exits
UVICORN = ("INFO:     Started server process [4242]\nINFO:     Waiting for application startup.\n"
           "INFO:     Application startup complete.\n")
BIND_99 = ("ERROR:    [Errno 99] error while attempting to bind on address ('::1', 8000, 0, 0): cannot assign "
           "requested address\n")
# uv crates/uv-resolver/src/error.rs NoSolution ("No solution found when resolving dependencies:") and
# src/pubgrub/report.rs ("Because {}we can conclude that {}", "And because {}we can conclude that {}", format_terms'
# "... are incompatible", "the requirements are unsatisfiable"), as uv wraps them
UV = ("  × No solution found when resolving dependencies:\n"
      "  ╰─▶ Because only plugin==0.2.0 is available and plugin==0.2.0 depends on torch>=2.1,<2.5, we can conclude\n"
      "      that all versions of plugin depend on torch>=2.1,<2.5.\n"
      "      And because vllm>=0.9.0 depends on torch==2.7.0, we can conclude that plugin and vllm>=0.9.0 are\n"
      "      incompatible.\n")
UV_WRAPPED = UV.split("\n", 1)[1].replace("  ╰─▶ ", "      ")  # an excerpt that starts below the header
# poetry's mixology failure message (from memory; captured outputs show it): "So, because X depends on ..., version
# solving failed."
POETRY = ("Because app depends on torch (2.7.0) and plugin (0.2.0) depends on torch (>=2.1,<2.5), plugin is forbidden.\n"
          "So, because app depends on plugin (0.2.0), version solving failed.\n")
# UCX uct_ib_md.c (ibv_reg_mr) and uct/ib/mlx5 devx (mlx5dv_devx_umem_reg), with uct_ib_memlock_limit_msg's hint
UCX_REG = ("[1700000000.123456] [node1:4242:0]  ib_md.c:287  UCX  ERROR ibv_reg_mr(address=0x7f2a00000000, "
           "length=65536, access=0xf) failed: Cannot allocate memory : Please set max locked memory (ulimit -l) to "
           "'unlimited' (current: 8192 kbytes)\n")
UCX_DEVX = ("[1700000000.123456] [node1:4242:0]  ib_mlx5dv_md.c:1010 UCX  ERROR mlx5_0: "
            "mlx5dv_devx_umem_reg(size=131072 access=0x0) failed: Cannot allocate memory\n")


@pytest.mark.parametrize("text", [BARE_EXCEPTION, UVICORN + BIND_99, UV, UV_WRAPPED, POETRY],
                         ids=["bare-exception", "bind-after-startup", "uv", "uv-wrapped", "poetry"])
def test_a_failure_without_an_error_level_is_a_first_error(tmp_path, text):
    d = diagnose_text(tmp_path, text)
    assert d.failed and d.first_errors, d.notes


def test_an_address_not_on_the_host_is_no_port_in_use(tmp_path):
    d = diagnose_text(tmp_path, UVICORN + BIND_99)
    assert d.findings == [] and d.likely == [], ([f.cause.id for f in d.findings], [f.cause.id for f in d.likely])


@pytest.mark.parametrize("text", [
    # prose with "because ... we can conclude" (a prompt or a generation a server logs): no pin, no dependency
    "INFO:     Because the prompt is short, we can conclude that the answer fits in one batch.\n",
    "Exceptions raised in callbacks: 0\n",  # a counter, not Python's line for an exception
    UVICORN + "INFO:     Uvicorn running on http://0.0.0.0:8000 (Press CTRL+C to quit)\n",
    # asyncio in debug mode only warns of an address family not enabled (bpo-30945: EADDRNOTAVAIL, the socket
    # dropped) and binds the others: uvicorn comes up after it
    UVICORN + "WARNING:asyncio:" + BIND_99.split("    ", 1)[1]
    + "INFO:     Uvicorn running on http://0.0.0.0:8000 (Press CTRL+C to quit)\n",
], ids=["prose", "counter", "uvicorn-up", "asyncio-debug-warning"])
def test_near_lines_stay_clean(tmp_path, text):
    assert_clean(diagnose_text(tmp_path, text))


@pytest.mark.parametrize("text", [UCX_REG, UCX_DEVX], ids=["ibv_reg_mr", "devx_umem_reg"])
def test_rdma_registration_enomem_is_no_host_oom(tmp_path, text):
    d = diagnose_text(tmp_path, text)
    assert d.first_errors and "host-oom" not in [f.cause.id for f in d.findings + d.likely]


def test_host_ram_that_ran_out_is_still_host_oom(tmp_path):
    # torch c10/core/impl/alloc_cpu.cpp: "DefaultCPUAllocator: can't allocate memory: you tried to allocate %zu bytes."
    line = ("RuntimeError: [enforce fail at alloc_cpu.cpp:83] data. DefaultCPUAllocator: can't allocate memory: you "
            "tried to allocate 4294967296 bytes. Error code 12 (Cannot allocate memory)\n")
    node = tmp_path / "logs" / "n0"
    node.mkdir(parents=True)
    (node / "engine.log").write_text(line)
    d = diagnose(tmp_path / "logs", cat=_without("host-oom"))  # meaning only, no signature
    assert [f.cause.id for f in d.likely][:1] == ["host-oom"]


def test_numpy_banner_alone_means_a_version_mismatch(tmp_path):
    # the banner with package-version-mismatch's signatures out: an event line, read for its meaning
    node = tmp_path / "logs" / "n0"
    node.mkdir(parents=True)
    (node / "engine.log").write_text(" module that was compiled using NumPy 1.x cannot be run in\n"
                                     "NumPy 2.0.0 as it may crash.\n")
    d = diagnose(tmp_path / "logs", cat=_without("package-version-mismatch"))
    assert [f.cause.id for f in d.likely][:1] == ["package-version-mismatch"]
