"""What the NPU runtime, HCCL and gloo check on the node when an engine initialises.

Read from the real host (interfaces via SIOCGIFADDR) and from the simulated hardware file
(``k3sim.hw``: device count and injected device faults, re-read on every call).
"""
from __future__ import annotations

import fcntl
import os
import socket
import struct
import time

from k3sim import hw
from k3sim.vllm.errors import StartupError

SIOCGIFADDR = 0x8915


def interfaces() -> dict[str, str]:
    """name -> IPv4 address, for interfaces that have one."""
    out: dict[str, str] = {}
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        for _, name in socket.if_nameindex():
            try:
                packed = fcntl.ioctl(sock.fileno(), SIOCGIFADDR, struct.pack("256s", name.encode()[:15]))
            except OSError:
                continue
            out[name] = socket.inet_ntoa(packed[20:24])
    finally:
        sock.close()
    return out


def get_ip() -> str:
    """vllm.utils.get_ip: VLLM_HOST_IP, else the address of the default route, else the node's host ip."""
    env = os.environ.get("VLLM_HOST_IP")
    if env:
        return env
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.connect(("8.8.8.8", 80))
            return s.getsockname()[0]
    except OSError:
        return str(hw.load().get("host_ip") or "127.0.0.1")


def _hccl_match(spec: str, names: list[str]) -> list[str]:
    """HCCL_SOCKET_IFNAME syntax: ``eth,enp`` prefixes, ``^eth`` excludes, ``=eth0`` exact, ``^=eth0``."""
    exclude = spec.startswith("^")
    body = spec[1:] if exclude else spec
    exact = body.startswith("=")
    items = [x for x in (body[1:] if exact else body).split(",") if x]

    def hit(name: str) -> bool:
        return any(name == i if exact else name.startswith(i) for i in items)

    return [n for n in names if hit(n) != exclude]


_PYHCCL = "vllm_ascend/distributed/device_communicators/pyhccl.py"
_C10D = "torch/distributed/distributed_c10d.py"


def check_network() -> None:
    """HCCL_IF_IP must be a local address; the socket interface variables must name interfaces owning it."""
    ifs = interfaces()
    ip = os.environ.get("HCCL_IF_IP")
    if ip and ip not in ifs.values():
        raise StartupError("RuntimeError", f"HcclGetRootInfo failed, error code is 4. HCCL_IF_IP={ip} is not an "
                           f"address of this host (local addresses: {', '.join(sorted(set(ifs.values())))}).",
                           _PYHCCL, stage="engine")
    spec = os.environ.get("HCCL_SOCKET_IFNAME")
    if spec:
        _check_hccl_ifname(spec, ifs, ip)
    for var in ("GLOO_SOCKET_IFNAME", "TP_SOCKET_IFNAME"):
        for name in [n for n in (os.environ.get(var) or "").split(",") if n]:
            _check_socket_ifname(var, name, ifs, ip)


def _check_hccl_ifname(spec: str, ifs: dict[str, str], ip: str | None) -> None:
    matched = _hccl_match(spec, list(ifs))
    if not matched:
        raise StartupError("RuntimeError", f"HcclGetRootInfo failed, error code is 4. No network interface "
                           f"matches HCCL_SOCKET_IFNAME={spec}.", _PYHCCL, stage="engine")
    if ip and not any(ifs[n] == ip for n in matched):
        raise StartupError("RuntimeError", f"HcclGetRootInfo failed, error code is 4. HCCL_SOCKET_IFNAME={spec} "
                           f"selects {', '.join(matched)}, which does not own HCCL_IF_IP={ip}.", _PYHCCL,
                           stage="engine")


def _check_socket_ifname(var: str, name: str, ifs: dict[str, str], ip: str | None) -> None:
    if name not in ifs:
        # torch's gloo device lookup (gloo/transport/tcp/device.cc)
        raise StartupError("RuntimeError", f"[enforce fail at ../third_party/gloo/gloo/transport/tcp/"
                           f"device.cc:83] ifa != nullptr. Unable to find address for: {name}", _C10D, stage="engine")
    if ip and ifs[name] != ip:
        raise StartupError("RuntimeError", f"{var}={name} has address {ifs[name]}, which is not "
                           f"HCCL_IF_IP={ip}; the NIC must own the communication IP.", _C10D, stage="engine")


def visible_devices(needed: int) -> list[int]:
    """ASCEND_RT_VISIBLE_DEVICES against the node's devices and their health."""
    count = hw.device_count()
    text = os.environ.get("ASCEND_RT_VISIBLE_DEVICES")
    where = "vllm_ascend/worker/worker.py"
    if text is None or text.strip() == "":
        ids = list(range(count))
    else:
        try:
            ids = [int(x) for x in text.split(",") if x.strip() != ""]
        except ValueError:
            raise StartupError("RuntimeError", f"ASCEND_RT_VISIBLE_DEVICES={text} is invalid: device ids must be "
                               "integers.", where, stage="engine") from None
        if any(not 0 <= i < count for i in ids):
            raise StartupError("RuntimeError", visible_devices_error(text, count), where, stage="engine")
        if len(set(ids)) != len(ids):
            raise StartupError("RuntimeError", f"ASCEND_RT_VISIBLE_DEVICES={text} lists a device twice.", where,
                               stage="engine")
    if len(ids) < needed:
        raise StartupError("AssertionError", f"please set tensor_parallel_size ({needed}) to less than max local "
                           f"gpu count ({len(ids)})", "vllm/v1/executor/multiproc_executor.py", stage="engine")
    for logical, dev in enumerate(ids[:needed]):
        health = hw.device_faults(dev).get("health")
        if health and str(health).upper() != "OK":
            raise StartupError("RuntimeError", device_setup_error(logical), where, stage="engine")
    return ids[:needed]


def visible_devices_error(text: str, count: int) -> str:
    """torch_npu's message when ASCEND_RT_VISIBLE_DEVICES names a device the node does not have, line for line
    as gpustack #3352 posted it (CANN rejects the variable, then cannot open device 0)."""
    now, pid = time.time(), os.getpid()
    trace = "[FUNC:FuncErrorReason][FILE:error_message_manage.cc][LINE:53]"
    return "\n".join([
        "init:build/CMakeFiles/torch_npu.dir/compiler_depend.ts:292 NPU function error: "
        "aclrtGetDeviceCount(&device_count), error code is 207004",
        f"[ERROR] {_cann_time(now)[:19]} (PID:{pid}, Device:-1, RankID:-1) ERR00100 PTA call acl api failed",
        "[Error]: The device is unavailable.",
        "        Check whether the device is running properly.",
        f"EE1001: [PID: {pid}] {_cann_time(now)} The argument is invalid.Reason: set ASCEND_RT_VISIBLE_DEVICES:"
        f"{text} error, input data rang[0-{count})",
        "        Solution: 1.Check the input parameter range of the function. 2.Check the function invocation "
        "relationship.",
        "        TraceBack (most recent call last):",
        f"        rtGetDeviceCount execute failed, reason=[driver error:no valid device]{trace}",
        "        get device count failed, runtime result = 207004.[FUNC:ReportCallError][FILE:log_inner.cpp][LINE:161]",
        f"        The argument is invalid.Reason: Set visible device failed, invalid device=0, input visible devices:{text}",
        f"        rtSetDevice execute failed, reason=[device id error]{trace}",
        "        open device 0 failed, runtime result = 107001.[FUNC:ReportCallError][FILE:log_inner.cpp][LINE:161]"])


def _cann_time(t: float) -> str:
    """CANN's log time, ``2025-11-19-11:14:58.516.606`` (milliseconds and microseconds apart)."""
    us = int(t * 1e6) % 1_000_000
    return time.strftime("%Y-%m-%d-%H:%M:%S", time.localtime(t)) + f".{us // 1000:03d}.{us % 1000:03d}"


def device_setup_error(logical: int) -> str:
    """torch_npu's message when the runtime cannot start a device (507033, ACL_ERROR_RT_DEV_SETUP_ERROR), line
    for line in the real formats: the PTA lines of vllm-ascend #1558 and #4284, the CANN error as torch_npu
    appends it (``CODE: [PID: N] time ...``, gpustack #3352) with the E39009 text and runtime trace of PTOAS #523."""
    now, pid = time.time(), os.getpid()
    return "\n".join([
        "Initialize:torch_npu/csrc/core/npu/sys_ctrl/npu_sys_ctrl.cpp:146 NPU function error: "
        "c10_npu::SetDevice(device_id_), error code is 507033",
        f"[ERROR] {_cann_time(now)[:19]} (PID:{pid}, Device:-1, RankID:-1) ERR00100 PTA call acl api failed",
        "[Error]: Failed to start the device. ",
        "        Rectify the fault based on the error information in the ascend log.",
        f"E39009: [PID: {pid}] {_cann_time(now)} Failed to connect the device.",
        "        Possible Cause: 1. Heartbeats are missing on the device. 2. The underlying channel is disconnected.",
        "        Solution: 1. Obtain the device log and contact technical support at https://www.hiascend.com/support. "
        "2. Restart the device.",
        "        TraceBack (most recent call last):",
        f"        open device {logical} failed, runtime result = 507033.[FUNC:ReportCallError][FILE:log_inner.cpp]"
        "[LINE:161]"])


def check_shm() -> None:
    """The ``shm_exhausted`` fault: /dev/shm is full (a container started without the guide's --shm-size, or
    segments an earlier run left behind), so the first tensor a worker shares through it fails the way torch's
    shared-memory allocator reports it (the format of hopsworks #1557: ``</torch_<pid>_<seed>_<n>>``, errno 28)."""
    if not hw.faults("engine").get("shm_exhausted"):
        return
    seed = int.from_bytes(os.urandom(4), "little") % 10**9
    raise StartupError("RuntimeError", f"unable to write to file </torch_{os.getpid()}_{seed}_0>: No space left "
                       "on device (28)", "torch/multiprocessing/reductions.py", stage="engine")


def hccl_link_timeout(rank: int, device: int = 0) -> StartupError:
    """HCCL's link-setup timeout as torch_npu raises it at the first collective (EI0006): the PTA lines of
    vllm-ascend #486 (ret 9 is HCCL_E_TIMEOUT, as the plog's ``ret[9]`` of #9447) and the EI0006 text of
    vllm-ascend #5461. The time is taken now: the rank that gives up first carries the earliest line."""
    now, pid = time.time(), os.getpid()
    return StartupError("RuntimeError", "\n".join([
        "InnerRunOpApi:torch_npu/csrc/framework/OpParamMaker.cpp:281 OPS function error: HcclAllreduce, error code is 9",
        f"[ERROR] {_cann_time(now)[:19]} (PID:{pid}, Device:{device}, RankID:{rank}) ERR01100 OPS call acl api failed.",
        f"[PID: {pid}] {_cann_time(now)} Get_Socket_Timeout(EI0006): Getting socket times out. Reason: 1. The remote "
        "does not initiate a connect request. some NPUs in the cluster are abnormal.    2. The remote does not "
        "initiate a connect request because the collective communication operator is started too late or is not "
        "started by some NPU in the cluster.    3. The communication link is disconnected. (For example, the IP "
        "addresses are not on the same network segment or the TLS configurations are inconsistent.)",
        "        Solution: 1. Check the rank service processes with other errors or no errors in the cluster.2. If "
        "this error is reported for all NPUs, check whether the time difference between the earliest and latest "
        "errors is greater than the connect timeout interval (120s by default). If so, adjust the timeout "
        "interval by using the HCCL_CONNECT_TIMEOUT environment variable.3. Check the connectivity of the "
        "communication link between nodes. (For example, run the 'hccn_tool -i $devid -tls -g' command to check "
        "the TLS status of each NPU)."]), "torch/distributed/distributed_c10d.py", stage="engine")
