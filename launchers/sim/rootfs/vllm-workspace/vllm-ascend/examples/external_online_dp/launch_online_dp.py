"""vllm-ascend examples/external_online_dp/launch_online_dp.py, as released (k3lab sim copy).

Same options, defaults and behaviour as the real launcher, including its quirks: ``--dp-rpc-port``
is ``type=str`` with an int default, so omitting it makes each child fail with ``TypeError``
inside ``subprocess.run``; there is no ``--pp-size``; child failures do not change the exit
status. One addition for the simulator: SIGTERM/SIGINT to the launcher is forwarded to each
engine's process group, so stopping the launcher stops the engines it started.
"""
import argparse
import multiprocessing
import os
import signal
import subprocess
import sys


def parse_args():
    parser = argparse.ArgumentParser()
    parser.add_argument("--dp-size", type=int, required=True, help="Data parallel size.")
    parser.add_argument("--tp-size", type=int, default=1, help="Tensor parallel size.")
    parser.add_argument("--dp-size-local", type=int, default=-1, help="Local data parallel size.")
    parser.add_argument("--dp-rank-start", type=int, default=0, help="Starting rank for data parallel.")
    parser.add_argument("--dp-address", type=str, required=True, help="IP address for data parallel master node.")
    parser.add_argument("--dp-rpc-port", type=str, default=12345, help="Port for data parallel master node.")
    parser.add_argument("--vllm-start-port", type=int, default=9000, help="Starting port for the engine.")
    return parser.parse_args()


TEMPLATE_PATH = "./run_dp_template.sh"


def run_command(visible_devices, dp_size, dp_rank, dp_address, dp_rpc_port, tp_size, vllm_engine_port):
    # Own process group (shared by bash and the engine) so the launcher can stop the whole tree.
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    os.setpgid(0, 0)
    command = [
        "bash",
        TEMPLATE_PATH,
        visible_devices,
        str(vllm_engine_port),
        str(dp_size),
        str(dp_rank),
        dp_address,
        dp_rpc_port,
        str(tp_size),
    ]
    subprocess.run(command, check=True)


def forward_stop(processes):
    def handler(signum, _frame):
        for process in processes:
            try:
                os.killpg(process.pid, signum)
            except (ProcessLookupError, PermissionError):
                process.terminate()  # not yet its own group leader: nothing started below it
        for process in processes:
            process.join()
        sys.exit(128 + signum)

    signal.signal(signal.SIGTERM, handler)
    signal.signal(signal.SIGINT, handler)


def main():
    args = parse_args()
    dp_size = args.dp_size
    tp_size = args.tp_size
    dp_size_local = args.dp_size_local
    if dp_size_local == -1:
        dp_size_local = dp_size
    if not os.path.exists(TEMPLATE_PATH):
        print(f"Template file {TEMPLATE_PATH} does not exist.")
        sys.exit(1)

    processes = []
    forward_stop(processes)
    for i in range(dp_size_local):
        dp_rank = args.dp_rank_start + i
        vllm_engine_port = args.vllm_start_port + i
        visible_devices = ",".join(str(x) for x in range(i * tp_size, (i + 1) * tp_size))
        process = multiprocessing.Process(
            target=run_command,
            args=(visible_devices, dp_size, dp_rank, args.dp_address, args.dp_rpc_port, tp_size, vllm_engine_port),
        )
        processes.append(process)
        process.start()

    for process in processes:
        process.join()


if __name__ == "__main__":
    main()
