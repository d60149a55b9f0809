"""``npu-smi`` stand-in: the ``info`` views the deployment guides and checks read.

Tables follow published ``npu-smi info`` output byte for byte (tests/corpus/npu_smi): A2 ``910B4``
and A3 ``Ascend910`` are 98 columns wide up to 25.x drivers and 116 wide from 26.x (vllm-ascend
#12980); the 950 layout is the 99-column one from the npu-smi source. The emulated driver version
is the node file's ``driver_version`` (default: the image's version.info). Health, the device
count and the super-pod identity come from the node file on every call; the node fault
``npu_smi: "garbled"`` prints a health cell no driver prints (the reader must fail it as unparsed).
"""
from __future__ import annotations

import re
import sys

from k3sim import hw, run_tool

DRIVER_VERSION = "25.2.0"  # keep in step with usr/local/Ascend/driver/version.info

USAGE = """Usage: npu-smi info <watch|proc|-h|-m|-l|-t type> [Options...]

Commands:
       watch          Show all device's status in scrolling format
       proc           Show device's matrix process status in scrolling format
       -h, --help     Show this help text and exit
       -m             Show all device's mapping information
       -l             Show all device's topology information
       -t type        Show information for type
                      type: board, flash, memory, usages, sensors, temp, power, volt, mac-addr,
                            common, health, product, ecc, ip, sys-time, i2c_check, work-mode,
                            ecc-enable, p2p-enable, ssh-enable, license, customized-info,
                            device-share, nve-level, aicpu-config, pcie-err, mcu-monitor,
                            err-count, boot-area, vnpu-mode, info-vnpu, vnpu-svm, cpu-num-cfg,
                            first-power-on-date, proc-mem, phyid-remap, vnpu-cfg-recover, key-manage,
                            template-info, pkcs-enable, p2p-mem-cfg, pwm-mode, pwm-duty-ratio,
                            boot-select, topo, spod-info.

Options:
       -i %d          Card ID
       -c %d          Chip ID
       -p %d          Chip Physical ID
"""
INFO_TYPES = set(re.findall(r"[\w-]+", USAGE.split("type: ")[1].split("Options:")[0]))

# Real PCIe bus ids of the NPUs, in device order.
BUS_IDS = {
    "A3": ["9D", "9F", "99", "9B", "95", "97", "91", "93", "8D", "8F", "89", "8B", "85", "87", "81", "83"],
    "A2": ["C1", "01", "C2", "02", "81", "41", "82", "42"],
    "950DT": ["01", "02", "03", "04", "81", "82", "83", "84"],
}
# (chip name, idle power W, idle HBM used MB, HBM total MB) per platform.
CHIP = {"A3": ("Ascend910", 178.9, 3412, 65536), "A2": ("910B4", 85.0, 2862, 32768),
        "950DT": ("Ascend950DT", 250.0, 4096, 98304)}

# Column layouts by table width: (outer line, split line, row split, the two row formats' widths)
LINE_98 = "+" + "-" * 96 + "+"
LINE_116 = "+" + "-" * 114 + "+"
SEP_116 = "+---------------------------+---------------+" + "-" * 70 + "+"
EQ_116 = "+===========================+===============+" + "=" * 70 + "+"
SEP_98 = "+---------------------------+---------------+----------------------------------------------------+"
EQ_98 = "+===========================+===============+====================================================+"
LINE_99 = "+" + "-" * 97 + "+"
EQ_99 = "+===========================+===============+=====================================================+"


class Fail(Exception):
    """A user error: the message goes to the terminal and the exit status is non-zero."""


def main(argv: list[str] | None = None) -> int:
    return run_tool(answer, argv)


def answer(args: list[str]) -> tuple[str, int]:
    """What the tool prints and its exit status."""
    try:
        if not args or args[0] != "info":
            raise Fail(USAGE)
        return info(hw.node(), args[1:]), 0
    except Fail as exc:
        return str(exc) if str(exc).endswith("\n") else f"{exc}\n", 255


def info(node: hw.Node, args: list[str]) -> str:
    if not args:
        return table(node)
    if args[0] in ("-h", "--help"):
        return USAGE
    if args == ["-m"]:
        return mapping(node)
    if args[0] != "-t" or len(args) < 2:
        raise Fail(USAGE)
    kind, opts = args[1], options(args[2:])
    if kind not in INFO_TYPES:
        raise Fail("Error parameter of -t\n" + USAGE)
    device_id = resolve(node, opts)
    if kind == "health":
        return health(node, device_id)
    if kind == "spod-info":
        return spod_info(node, device_id)
    raise Fail(f"k3sim: npu-smi info -t {kind} is not simulated")


def options(args: list[str]) -> dict[str, int]:
    if len(args) % 2:
        raise Fail(USAGE)
    opts = {}
    for flag, value in zip(args[::2], args[1::2]):
        if flag not in ("-i", "-c") or not value.isdigit():
            raise Fail(USAGE)
        opts[flag] = int(value)
    return opts


def resolve(node: hw.Node, opts: dict[str, int]) -> int:
    """Map ``-i card -c chip`` to a logical device id (A3 has two chips per card)."""
    if "-i" not in opts:
        raise Fail(USAGE)
    chips = 2 if node.platform == "A3" else 1
    card, chip = opts["-i"], opts.get("-c", 0)
    if card >= node.device_count // chips:
        raise Fail(f"Card ID {card} does not exist.")
    if chip >= chips:
        raise Fail(f"Chip ID {chip} does not exist.")
    return card * chips + chip


def health_of(node: hw.Node, device_id: int) -> str:
    return str(node.device_faults(device_id).get("health", "OK"))


def health(node: hw.Node, device_id: int) -> str:
    fault = node.device_faults(device_id)
    rows = [("Health Status", health_of(node, device_id)),
            ("Error Code", fault.get("error_code", "NA")),
            ("Error Information", fault.get("error_info", "NA"))]
    return "".join(f"\t{key:<30} : {value}\n" for key, value in rows)


def spod_info(node: hw.Node, device_id: int) -> str:
    # fault spod_unsupported: an A3 whose driver predates super pod queries answers as other boards do
    if node.platform != "A3" or node.data.get("faults", {}).get("spod_unsupported"):
        raise Fail("This device does not support querying spod-info.")
    server_index = int(node.data.get("server_index", 0))
    sdid = (server_index << 22) | (device_id << 16)  # server id in bits 31..22, chip in 21..16
    rows = [("SDID", sdid), ("Super Pod Size", int(node.data.get("super_pod_size", 384))),
            ("Super Pod ID", int(node.data.get("super_pod_id", 0))), ("Server Index", server_index)]
    return "".join(f"\t{key:<30} : {value}\n" for key, value in rows)


def driver_version(node: hw.Node) -> str:
    return str(node.data.get("driver_version") or DRIVER_VERSION)


def wide(version: str) -> bool:
    """26.x drivers print the 116-column table (vllm-ascend #12980, nyaterm #268)."""
    major = version.split(".")[0]
    return major.isdigit() and int(major) >= 26


# The two layouts of the 910 tables: the classic 98 columns and the 26.x drivers' 116 (vllm-ascend #12980);
# only widths and the header and process-table texts differ, the rows are the same.
_LAYOUT = {
    98: dict(line="LINE_98", sep="SEP_98", eq="EQ_98", ver=(24, 53), watts=11, temp=17, huge=14, core=11, mem=10,
             hbm=14, idle=61,
             head="| NPU   Name                | Health        | Power(W)    Temp(C)           Hugepages-Usage(page)|",
             head2="| Bus-Id        | AICore(%)   Memory-Usage(MB)  HBM-Usage(MB)        |",
             procs="| NPU     Chip              | Process id    | Process name             | Process memory(MB)      |"),
    116: dict(line="LINE_116", sep="SEP_116", eq="EQ_116", ver=(35, 60), watts=20, temp=23, huge=17, core=20, mem=16,
              hbm=17, idle=79,
              head="| NPU   Name                | Health        | Power(W)             Temp(C)                 "
                   "Hugepages-Usage(page)   |",
              head2="| Bus-Id        | AICore(%)            Memory-Usage(MB)        HBM-Usage(MB)           |",
              procs="| NPU     Chip              | Process id    | Process name       | Process memory(MB)    "
                    "| Process id in container |"),
}


def table(node: hw.Node) -> str:
    if node.platform == "950DT":
        return table_950(node)
    return table_910(node, 116 if wide(driver_version(node)) else 98)


def table_910(node: hw.Node, columns: int) -> str:
    lay = _LAYOUT[columns]
    line, sep, eq = (globals()[lay[k]] for k in ("line", "sep", "eq"))
    name, power, hbm_used, hbm_total = CHIP[node.platform]
    a3 = node.platform == "A3"
    chips = 2 if a3 else 1
    version = driver_version(node)
    v1, v2 = lay["ver"]
    out = [line, f"| npu-smi {version:<{v1}} Version: {version:<{v2}}|", sep, lay["head"],
           ("| Chip  Phy-ID              " if a3 else "| Chip                      ") + lay["head2"], eq]
    for card in range(node.device_count // chips):
        for chip in range(chips):
            dev = card * chips + chip
            if node.device_faults(dev).get("missing"):
                continue  # a die the driver no longer enumerates has no row
            watts = "-" if chip == 1 else f"{power + dev % 5 * 1.3:.1f}"
            out.append(f"| {card:<5} {name:<20}| {health_cell(node, dev):<13} | {watts:<{lay['watts']}} "
                       f"{36 + dev % 3:<{lay['temp']}} {0:<5}/ {0:<{lay['huge']}}|")
            slot = f"| {chip:<5} {dev:<20}|" if a3 else f"| {chip:<26}|"
            out.append(f"{slot} 0000:{BUS_IDS[node.platform][dev]}:00.0  | {0:<{lay['core']}} {0:<5}/ "
                       f"{0:<{lay['mem']}} {hbm_used - chip * 223:<5}/ {hbm_total:<{lay['hbm']}}|")
            out.append(line if chip + 1 < chips else eq)
    out += [sep, lay["procs"], eq]
    for card in range(node.device_count // chips):
        out += [f"| No running processes found in NPU {card:<{lay['idle']}}|", eq]
    return "\n".join(out) + "\n"


def health_cell(node: hw.Node, device_id: int) -> str:
    """The health column; a node with the ``npu_smi: garbled`` fault prints what no reader knows."""
    if node.faults("npu_smi").get("table") == "garbled" and device_id == 1:
        return "ERR!"
    return health_of(node, device_id)


def table_950(node: hw.Node) -> str:
    name, power, hbm_used, hbm_total = CHIP["950DT"]
    version = driver_version(node)
    out = [LINE_99, f"| npu-smi {version:<40} Version: {version:<37} |",
           "+--------+------------------+---------------+-----------------------------------------------------+",
           "| NPU ID | Name             | Health        | Power(W)    Temp(C)           Hugepages-Usage(page) |",
           "|        |                  | Bus-Id        | NPU Util(%) Memory-Usage(MB)  HBM-Usage(MB)         |",
           "+========+==================+===============+=====================================================+"]
    for dev in range(node.device_count):
        if node.device_faults(dev).get("missing"):
            continue  # an NPU the driver no longer enumerates has no row
        out.append(f"| {dev:<7}| {name:<17}| {health_cell(node, dev):<13} | {power + dev % 5 * 1.3:<11.1f} "
                   f"{36 + dev % 3:<17} {0:<6}/ {0:<13} |")
        out.append(f"|{'':<8}|{'':<18}| 0000:{BUS_IDS['950DT'][dev]}:00.0  | {0:<11} {0:<5}/ {0:<10} "
                   f"{hbm_used:<6}/ {hbm_total:<13} |")
        out.append("+========+==================+===============+=====================================================+")
    out += ["+---------------------------+---------------+-----------------------------------------------------+",
            "| NPU ID                    | Process id    | Process name             | Process memory(MB)       |",
            EQ_99]
    for dev in range(node.device_count):
        out += [f"| No running processes found in NPU {dev:<62}|", EQ_99]
    return "\n".join(out) + "\n"


def mapping(node: hw.Node) -> str:
    if node.platform == "A3":
        out = ["\t{:<30} {:<30} {:<30} {:<30} {:<30}".format("NPU ID", "Chip ID", "Chip Logic ID", "Chip Phy-ID",
                                                             "Chip Name")]
        for card in range(node.device_count // 2):
            out += [f"\t{card:<30} {chip:<30} {card * 2 + chip:<30} {card * 2 + chip:<30} Ascend910" for chip in (0, 1)]
            out.append(f"\t{card:<30} {2:<30} {'-':<30} {'-':<30} {'Mcu':<30}")
    elif node.platform == "A2":
        out = ["\t{:<30} {:<30} {:<30} {:<30}".format("NPU ID", "Chip ID", "Chip Logic ID", "Chip Name")]
        for card in range(node.device_count):
            out += [f"\t{card:<30} {0:<30} {card:<30} Ascend 910B4", f"\t{card:<30} {1:<30} {'-':<30} {'Mcu':<30}"]
    else:
        out = ["\t{:<30} {:<30} {:<30} {:<30} {:<30}".format("NPU ID", "Slot ID", "Chip ID", "Chip Phy-ID", "Chip Name")]
        out += [f"\t{dev:<30} {dev + 1:<30} {0:<30} {dev:<30} {CHIP['950DT'][0]}" for dev in range(node.device_count)]
    return "\n".join(out) + "\n"


if __name__ == "__main__":
    sys.exit(main())
