# vllm-ascend examples/disaggregated_prefill_v1/load_balance_proxy_server_example.py (k3lab sim copy)
#
# The released proxy's command line, endpoints, scheduling and prefill -> decode protocol,
# served with the standard library and httpx instead of FastAPI/uvicorn (not in the sim image).
# Like the original it uses httpx with its default trust_env, so http_proxy / HTTPS_PROXY /
# NO_PROXY in the environment apply to the backend calls exactly as they do for the real proxy.
#
#   python load_balance_proxy_server_example.py --host 0.0.0.0 --port 9000 \
#     --prefiller-hosts 127.0.0.1 --prefiller-ports 8100 \
#     --decoder-hosts 127.0.0.1 127.0.0.1 --decoder-ports 8200 8201
#
# Differences from the original: one serving process whatever --workers says (so no manager
# file in /tmp), uvicorn's console lines are reproduced rather than produced by uvicorn, and the
# prompt_logprobs merge path of newer versions is not implemented.

import argparse
import contextlib
import ipaddress
import json
import logging
import os
import signal
import sys
import threading
import time
import traceback
import uuid
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qsl, urlsplit

import httpx

logger = logging.getLogger(Path(__file__).stem)
PREFILL, DECODE = "prefill", "decode"
TAINT_PRIORITY = 1e15


def uvicorn_log(level, message):
    print(f"{level + ':':<10}{message}", file=sys.stderr, flush=True)


def parse_args():
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--host", type=str, default="localhost")
    parser.add_argument("--prefiller-hosts", type=str, nargs="+", default=["localhost"])
    parser.add_argument("--prefiller-ports", type=int, nargs="+", default=[8001])
    parser.add_argument("--decoder-hosts", type=str, nargs="+", default=["localhost"])
    parser.add_argument("--decoder-ports", type=int, nargs="+", default=[8002])
    parser.add_argument("--max-retries", type=int, default=3, help="Maximum number of retries for HTTP requests")
    parser.add_argument(
        "--retry-delay", type=float, default=0.001, help="Base delay (seconds) for exponential backoff retries"
    )
    parser.add_argument(
        "--max-waiting-retries", type=int, default=3, help="Maximum number of retries for waiting nodes to be started"
    )
    parser.add_argument(
        "--waiting-retry-interval",
        type=float,
        default=10,
        help="Check interval (seconds) for waiting nodes to be started",
    )
    parser.add_argument(
        "--workers",
        type=int,
        default=1,
        help="Number of uvicorn worker processes. Scheduling state is shared across workers.",
    )
    parser.add_argument(
        "--log-level",
        type=str,
        default="INFO",
        choices=["DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"],
        help="Log level for the proxy server.",
    )
    args = parser.parse_args()
    if len(args.prefiller_hosts) != len(args.prefiller_ports):
        raise ValueError("Number of prefiller hosts must match number of prefiller ports")
    if len(args.decoder_hosts) != len(args.decoder_ports):
        raise ValueError("Number of decoder hosts must match number of decoder ports")
    args.prefiller_instances = list(zip(args.prefiller_hosts, args.prefiller_ports))
    args.decoder_instances = list(zip(args.decoder_hosts, args.decoder_ports))
    return args


def setup_logging(log_level):
    logging.basicConfig(
        level=logging.WARNING, format="%(asctime)s %(levelname)s [%(name)s] %(message)s", force=True
    )
    logger.setLevel(getattr(logging, log_level.upper()))


def server_key(host, port):
    return f"{host.replace('localhost', '0.0.0.0').replace('127.0.0.1', '0.0.0.0')}:{int(port)}"


def build_server_url(host, port):
    try:
        if isinstance(ipaddress.ip_address(host), ipaddress.IPv6Address):
            return f"http://[{host}]:{port}"
    except ValueError:
        pass
    return f"http://{host}:{port}"


def calculate_prefill_score(request_length):
    return request_length / 4.0 * 0.0345 + 120.0745


def auth_headers(request_id):
    # The original sends "Bearer None" when OPENAI_API_KEY is unset; so does this copy.
    return {"Authorization": f"Bearer {os.environ.get('OPENAI_API_KEY')}", "X-Request-Id": request_id}


def extract_cached_tokens(response_json):
    usage = response_json.get("usage") or {}
    cached_tokens = (usage.get("prompt_tokens_details") or {}).get("cached_tokens")
    return cached_tokens if isinstance(cached_tokens, int) else 0


def update_cached_tokens_in_chunk(chunk_json, cached_tokens):
    if cached_tokens is None or not isinstance(chunk_json.get("usage"), dict):
        return False
    usage = chunk_json["usage"]
    if not isinstance(usage.get("prompt_tokens_details"), dict):
        usage["prompt_tokens_details"] = {}
    usage["prompt_tokens_details"]["cached_tokens"] = cached_tokens
    return True


def encode_response_chunk(chunk_json, is_sse):
    chunk = json.dumps(chunk_json, ensure_ascii=False).encode("utf-8")
    return b"data: " + chunk + b"\n\n" if is_sse else chunk


def build_prefill_request(req_data):
    payload = req_data.copy()
    payload["kv_transfer_params"] = {
        "do_remote_decode": True,
        "do_remote_prefill": False,
        "remote_engine_id": None,
        "remote_block_ids": None,
        "remote_host": None,
        "remote_port": None,
    }
    payload["stream"] = False
    payload["max_tokens"] = 1
    payload["min_tokens"] = 1
    if "max_completion_tokens" in payload:
        payload["max_completion_tokens"] = 1
    payload.pop("stream_options", None)
    return payload


@dataclass
class BackendServer:
    host: str
    port: int
    ordinal: int
    active_tokens: float = 0.0
    active_kv_cache: float = 0.0


class Scheduler:
    """Least-loaded choice: prefill by active tokens + 0.3 * reserved KV, decode by active tokens."""

    def __init__(self, prefiller_instances, decoder_instances):
        self.lock = threading.RLock()
        self.request_num = 0
        self.servers = {PREFILL: {}, DECODE: {}}
        self.tainted = {PREFILL: set(), DECODE: set()}
        self.waiting_nodes = {}  # key -> (role, (host, port), retries)
        self.ordinal = 0
        for host, port in prefiller_instances:
            self._add(PREFILL, host, port)
        for host, port in decoder_instances:
            self._add(DECODE, host, port)

    def _add(self, role, host, port):
        key = server_key(host, port)
        if key in self.servers[role]:
            return False
        self.servers[role][key] = BackendServer(host, int(port), self.ordinal)
        self.ordinal += 1
        return True

    def _priority(self, role, key):
        if key in self.tainted[role]:
            return TAINT_PRIORITY
        entry = self.servers[role][key]
        return entry.active_tokens + entry.active_kv_cache * 0.3 if role == PREFILL else entry.active_tokens

    def pick(self, role, load, begin=False):
        with self.lock:
            if not self.servers[role]:
                raise RuntimeError(f"No available {role} servers")
            key = min(self.servers[role], key=lambda k: (self._priority(role, k), self.servers[role][k].ordinal))
            entry = self.servers[role][key]
            if role == PREFILL:
                entry.active_kv_cache += load
            else:
                entry.active_tokens += load
            if begin:
                self.request_num += 1
            return {"key": key, "host": entry.host, "port": entry.port}

    def release(self, role, key, load):
        with self.lock:
            entry = self.servers[role].get(key)
            if entry is None:
                return
            if role == PREFILL:
                entry.active_kv_cache = max(0.0, entry.active_kv_cache - load)
            else:
                entry.active_tokens -= load

    def finish_request(self, prefiller_key, prefiller_load, decoder_key, decoder_load, release_prefill_kv):
        with self.lock:
            if release_prefill_kv:
                self.release(PREFILL, prefiller_key, prefiller_load)
            self.release(DECODE, decoder_key, decoder_load)
            self.request_num = max(0, self.request_num - 1)

    def snapshot(self):
        with self.lock:
            return {
                f"{role}_instances": [
                    {"host": e.host, "port": e.port} for e in sorted(self.servers[role].values(), key=lambda e: e.ordinal)
                ]
                for role in (PREFILL, DECODE)
            }

    def healthcheck(self):
        with self.lock:
            return {
                "status": "ok",
                "prefill_instances": len(self.servers[PREFILL]),
                "decode_instances": len(self.servers[DECODE]),
                "request_num": self.request_num,
            }

    def log_status(self, msg):
        snapshot = self.snapshot()
        logger.info(
            "%s prefill=%s decode=%s",
            msg,
            [f"{s['host']}:{s['port']}" for s in snapshot["prefill_instances"]],
            [f"{s['host']}:{s['port']}" for s in snapshot["decode_instances"]],
        )

    def add_instances(self, role, instances):
        waiting = []
        with self.lock:
            for host, port in instances:
                key = server_key(host, port)
                if key in self.servers[role] or key in self.waiting_nodes:
                    continue
                self.waiting_nodes[key] = (role, (host, int(port)), 0)
                waiting.append(f"{host}:{port}")
        return waiting

    def activate_waiting_instance(self, role, host, port):
        with self.lock:
            key = server_key(host, port)
            self.waiting_nodes.pop(key, None)
            if key in self.tainted[role]:
                self.tainted[role].discard(key)
            elif self._add(role, host, port):
                self.log_status(f"Add {role} instance: {host}:{port}.")

    def remove_instances(self, role, instances):
        """Remove now when idle; with requests in flight taint (drain) them and return True."""
        if not instances:
            return False
        keys = {server_key(host, port) for host, port in instances}
        with self.lock:
            if self.request_num > 0:
                self.tainted[role].update(keys)
                logger.warning("Start to taint %s instances %s.", role, sorted(keys))
                return True
            removed = False
            for key in keys:
                removed = self.servers[role].pop(key, None) is not None or removed
                self.waiting_nodes.pop(key, None)
            self.tainted[role].difference_update(keys)
            if removed:
                self.log_status(f"Remove {role} instances: {sorted(keys)}.")
            return False

    def finalize_tainted_instances(self):
        with self.lock:
            if self.request_num != 0:
                return
            for role in (PREFILL, DECODE):
                if self.tainted[role]:
                    keys = list(self.tainted[role])
                    for key in keys:
                        self.servers[role].pop(key, None)
                    self.tainted[role].clear()
                    self.log_status(f"Remove {role} instances after drain: {keys}.")


class NodeListener:
    """Adds waiting instances once their GET /v1/models answers; finishes drained removals."""

    def __init__(self, proxy):
        self.proxy = proxy
        threading.Thread(target=self._run, daemon=True).start()

    def _run(self):
        args, scheduler = self.proxy.args, self.proxy.scheduler
        while True:
            for key, (role, (host, port), retries) in list(scheduler.waiting_nodes.items()):
                is_valid = self.check_instance_status(host, port)
                print(f"Checking instance {key}...", flush=True)
                retries += 1
                if is_valid:
                    scheduler.activate_waiting_instance(role, host, port)
                elif retries >= args.max_waiting_retries:
                    print(f"Instance {key} was not added to the proxy.", flush=True)
                    with scheduler.lock:
                        scheduler.waiting_nodes.pop(key, None)
                else:
                    with scheduler.lock:
                        if key in scheduler.waiting_nodes:
                            scheduler.waiting_nodes[key] = (role, (host, port), retries)
            scheduler.finalize_tainted_instances()
            time.sleep(args.waiting_retry_interval)

    @staticmethod
    def check_instance_status(host, port):
        headers = {"Authorization": f"Bearer {os.environ.get('OPENAI_API_KEY')}"}
        try:
            with httpx.Client(timeout=5.0, base_url=f"{build_server_url(host, port)}/v1") as client:
                client.get("/models", headers=headers).raise_for_status()
                return True
        except (httpx.RequestError, httpx.HTTPStatusError):
            return False


@dataclass
class InstanceInfo:
    request_id: str
    prefiller_key: str
    prefiller_score: float
    decoder_key: str
    decoder_score: float
    decoder_host: str
    decoder_port: int
    prefiller_cached_tokens: int = None


class Proxy:
    def __init__(self, args):
        self.args = args
        self.scheduler = Scheduler(args.prefiller_instances, args.decoder_instances)
        self.clients = {}
        self.clients_lock = threading.Lock()

    def client(self, role, key):
        """One keep-alive httpx client per backend, created on first use."""
        with self.clients_lock:
            if (role, key) not in self.clients:
                entry = self.scheduler.servers[role].get(key)
                if entry is None:
                    raise RuntimeError(f"No available {role} servers")
                self.clients[role, key] = httpx.Client(
                    timeout=None,
                    base_url=f"{build_server_url(entry.host, entry.port)}/v1",
                    limits=httpx.Limits(max_connections=100000, max_keepalive_connections=100000),
                )
            return self.clients[role, key]

    def send_request_to_service(self, client, endpoint, req_data, request_id):
        req_data = build_prefill_request(req_data)
        headers = auth_headers(request_id)
        max_attempts = max(1, self.args.max_retries)
        for attempt in range(1, max_attempts + 1):
            try:
                response = client.post(endpoint, json=req_data, headers=headers)
                response.raise_for_status()
                return response
            except httpx.HTTPStatusError as exc:
                if exc.response.status_code == 400 or attempt == max_attempts:
                    raise
                logger.warning("Attempt %s failed for %s: %s", attempt, endpoint, exc)
            except httpx.RequestError as exc:
                if attempt == max_attempts:
                    raise
                logger.warning("Attempt %s failed for %s: %s", attempt, endpoint, exc)
            time.sleep(self.args.retry_delay * (2 ** (attempt - 1)))

    def stream_service_response(self, client, endpoint, req_data, request_id):
        headers = auth_headers(request_id)
        max_attempts = max(1, self.args.max_retries)
        for attempt in range(1, max_attempts + 1):
            first_chunk_sent = False
            try:
                with client.stream("POST", endpoint, json=req_data, headers=headers) as response:
                    response.raise_for_status()
                    for chunk in response.iter_bytes():
                        first_chunk_sent = True
                        yield chunk
                    return
            except httpx.HTTPStatusError as exc:
                if exc.response.status_code == 400 or attempt == max_attempts:
                    raise
                logger.warning("Attempt %s failed for streaming %s: %s", attempt, endpoint, exc)
            except Exception as exc:
                if first_chunk_sent:
                    logger.error("Streaming to client interrupted after response started: %s", exc)
                    return
                if attempt == max_attempts:
                    raise
                logger.warning("Attempt %s failed for streaming %s: %s", attempt, endpoint, exc)
            time.sleep(self.args.retry_delay * (2 ** (attempt - 1)))

    def assign_instances(self, api, req_data, request_length, is_initial_request):
        prefiller_score = calculate_prefill_score(request_length)
        decoder_score = request_length
        request_id = str(uuid.uuid4())
        prefiller = self.scheduler.pick(PREFILL, prefiller_score, begin=is_initial_request)
        try:
            response = self.send_request_to_service(
                self.client(PREFILL, prefiller["key"]), api, req_data, request_id
            )
            response_json = response.json()
            kv_transfer_params = response_json.get("kv_transfer_params", {})
            if kv_transfer_params:
                req_data["kv_transfer_params"] = kv_transfer_params
            decoder = self.scheduler.pick(DECODE, decoder_score)
        except Exception:
            if is_initial_request:
                self.scheduler.finish_request(prefiller["key"], prefiller_score, None, 0.0, True)
            else:
                self.scheduler.release(PREFILL, prefiller["key"], prefiller_score)
            raise
        return InstanceInfo(
            request_id=request_id,
            prefiller_key=prefiller["key"],
            prefiller_score=prefiller_score,
            decoder_key=decoder["key"],
            decoder_score=decoder_score,
            decoder_host=decoder["host"],
            decoder_port=decoder["port"],
            prefiller_cached_tokens=extract_cached_tokens(response_json),
        )

    def reassign_instances(self, api, req_data, request_length, previous):
        self.scheduler.release(PREFILL, previous.prefiller_key, previous.prefiller_score)
        self.scheduler.release(DECODE, previous.decoder_key, previous.decoder_score)
        return self.assign_instances(api, req_data, request_length, is_initial_request=False)

    def finish(self, info, release_prefill_kv):
        self.scheduler.finish_request(
            info.prefiller_key, info.prefiller_score, info.decoder_key, info.decoder_score, release_prefill_kv
        )

    def generate_stream(self, api, req_data, info, stream_flag, origin_prompt):
        """Decode leg: relays the decoder's bytes, handling the recompute scheduler's retries."""
        chat_flag = "messages" in req_data
        messages = req_data.get("messages")
        origin_max_tokens = req_data.get("max_tokens", 16)
        generated_token, released_kv, retry_count, retry, completion_tokens = "", False, 0, True, 0
        try:
            while retry:
                retry = False
                chunks = self.stream_service_response(self.client(DECODE, info.decoder_key), api, req_data,
                                                      info.request_id)
                with contextlib.closing(chunks):
                    for chunk in chunks:
                        if not released_kv and chunk:
                            self.scheduler.release(PREFILL, info.prefiller_key, info.prefiller_score)
                            released_kv = True
                        try:
                            chunk_str = chunk.decode("utf-8").strip()
                        except UnicodeDecodeError:
                            yield chunk
                            continue
                        if not chunk_str:
                            continue
                        is_sse = chunk_str.startswith("data: ")
                        if is_sse:
                            chunk_str = chunk_str[len("data: "):]
                        try:
                            chunk_json = json.loads(chunk_str)
                        except json.JSONDecodeError:
                            yield chunk
                            continue
                        choices = chunk_json.get("choices", [])
                        if not choices or not stream_flag:
                            if update_cached_tokens_in_chunk(chunk_json, info.prefiller_cached_tokens):
                                chunk = encode_response_chunk(chunk_json, is_sse)
                                if not choices:
                                    yield chunk
                                    continue
                        choice = choices[0]
                        delta = choice.get("delta") or {}
                        message = choice.get("message") or {}
                        generated_token += delta.get("content") or message.get("content") or choice.get("text") or ""
                        usage = chunk_json.get("usage", {})
                        completion_tokens += 1 if stream_flag else usage.get("completion_tokens", 0)
                        if choice.get("stop_reason") == "recomputed":
                            retry = True
                            retry_count += 1
                            if chat_flag:
                                messages[0]["content"] = origin_prompt + generated_token
                            else:
                                req_data["prompt"] = origin_prompt + generated_token
                            req_data["max_tokens"] = origin_max_tokens - completion_tokens + retry_count
                            request_length = len(json.dumps(req_data).encode("utf-8"))
                            info = self.reassign_instances(api, req_data, request_length, info)
                            released_kv = False
                            break
                        if retry_count > 0 and not stream_flag:
                            if chat_flag:
                                choice["message"]["content"] = generated_token
                            else:
                                choice["text"] = generated_token
                            chunk = encode_response_chunk(chunk_json, is_sse)
                        yield chunk
        except GeneratorExit:
            logger.warning(
                "Streaming from decoder %s:%s was cancelled; releasing request %s resources",
                info.decoder_host, info.decoder_port, info.request_id,
            )
            raise
        except Exception as exc:
            logger.error(
                "Error during streaming from decoder %s:%s: %s while handling request %s; releasing prefiller KV",
                info.decoder_host, info.decoder_port, exc, info.request_id,
            )
        finally:
            self.finish(info, release_prefill_kv=not released_kv)

    def completions(self, api, body):
        """(status, content type, body bytes or a chunk iterator) for /v1/completions and chat."""
        info = None
        try:
            req_data = json.loads(body)
            info = self.assign_instances(api, req_data, len(body), is_initial_request=True)
            stream_flag = bool(req_data.get("stream", False))
            if "prompt" in req_data:
                origin_prompt = req_data["prompt"]
            elif "messages" in req_data:
                origin_prompt = req_data["messages"][0].get("content", "")
            else:
                origin_prompt = ""
            media_type = "text/event-stream; charset=utf-8" if stream_flag else "application/json"
            return 200, media_type, self.generate_stream(api, req_data, info, stream_flag, origin_prompt)
        except Exception as e:
            if info is not None:
                self.finish(info, release_prefill_kv=True)
            print(f"Error occurred in disagg prefill proxy server - {api} endpoint")
            print(traceback.format_exc(), flush=True)
            if isinstance(e, httpx.HTTPStatusError) and e.response is not None:
                try:
                    err_body = e.response.json()
                except Exception:
                    err_body = {"error": {"message": e.response.text or "upstream error"}}
                return e.response.status_code, "application/json", json_bytes(err_body)
            return 500, "text/plain; charset=utf-8", b"Internal Server Error"

    def models(self):
        snapshot = self.scheduler.snapshot()
        candidates = [(PREFILL, s) for s in snapshot["prefill_instances"]] + [
            (DECODE, s) for s in snapshot["decode_instances"]
        ]
        if not candidates:
            return 503, "application/json", json_bytes({"error": "No available backend instances"})
        failures = []
        request_id = str(uuid.uuid4())
        for role, server in candidates:
            host, port = server["host"], server["port"]
            try:
                response = self.client(role, server_key(host, port)).get(
                    "/models", headers=auth_headers(request_id), timeout=3.0
                )
                response.raise_for_status()
                return 200, "application/json", response.content
            except (httpx.RequestError, httpx.HTTPStatusError) as exc:
                logger.warning("GET /models from %s:%s failed: %s", host, port, exc)
                failures.append(f"{host}:{port}")
        return 503, "application/json", json_bytes(
            {"error": "All backend instances failed to serve /v1/models", "failed": failures}
        )

    def reset_prefix_cache(self, params):
        snapshot = self.scheduler.snapshot()
        failures = []
        for role in (PREFILL, DECODE):
            for server in snapshot[f"{role}_instances"]:
                base_url = build_server_url(server["host"], server["port"])
                try:
                    client = self.client(role, server_key(server["host"], server["port"]))
                    client.post(f"{base_url}/reset_prefix_cache", params=params).raise_for_status()
                except Exception as e:
                    logger.error("reset_prefix_cache failed for %s: %s", base_url, e)
                    failures.append(base_url)
        if failures:
            return 500, "application/json", json_bytes({"failed": failures})
        return 200, "text/plain; charset=utf-8", b""

    def adjust_instances(self, adjust_mode, body):
        req_data = json.loads(body)
        instance_type = req_data.get("type", "")
        instances = req_data.get("instances", [])
        if isinstance(instances, str):
            instances = [instances]
        parsed = [(host, int(port)) for host, port in (instance.split(":") for instance in instances)]
        all_msg = f"{adjust_mode} {instance_type} instances: {[f'{host}:{port}' for host, port in parsed]}."
        if instance_type not in (PREFILL, DECODE):
            return 200, "application/json", json_bytes({
                "error": f"Instance type {instance_type!r} is not supported. Only 'prefill' and 'decode' are allowed."
            })
        if adjust_mode == "add":
            waiting = self.scheduler.add_instances(instance_type, parsed)
            if waiting:
                all_msg = f"Instances {waiting} are waiting to be added."
        elif self.scheduler.remove_instances(instance_type, parsed):
            all_msg = (f"Instances {[f'{host}:{port}' for host, port in parsed]} "
                       "are isolated and waiting to be removed.")
        snapshot = self.scheduler.snapshot()
        return 200, "application/json", json_bytes({
            "message": all_msg,
            "current_prefill_instances": [f"{s['host']}:{s['port']}" for s in snapshot["prefill_instances"]],
            "current_decode_instances": [f"{s['host']}:{s['port']}" for s in snapshot["decode_instances"]],
        })


def json_bytes(body):
    return json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode("utf-8")


def handler_class(proxy):
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        server_version = "uvicorn"
        sys_version = ""

        def do_GET(self):  # noqa: N802 (http.server naming)
            path = urlsplit(self.path).path
            if path == "/v1/models":
                self.respond(*proxy.models())
            elif path == "/healthcheck":
                self.respond(200, "application/json", json_bytes(proxy.scheduler.healthcheck()))
            else:
                self.not_found(("/v1/completions", "/v1/chat/completions", "/reset_prefix_cache",
                                "/instances/add", "/instances/remove"))

        def do_POST(self):  # noqa: N802
            parts = urlsplit(self.path)
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            if parts.path in ("/v1/completions", "/v1/chat/completions"):
                self.respond(*proxy.completions(parts.path[len("/v1"):], body))
            elif parts.path == "/reset_prefix_cache":
                self.respond(*proxy.reset_prefix_cache(dict(parse_qsl(parts.query))))
            elif parts.path in ("/instances/add", "/instances/remove"):
                try:
                    self.respond(*proxy.adjust_instances(parts.path.rsplit("/", 1)[1], body))
                except Exception:
                    print(traceback.format_exc(), flush=True)
                    self.respond(500, "text/plain; charset=utf-8", b"Internal Server Error")
            else:
                self.not_found(("/v1/models", "/healthcheck"))

        def not_found(self, other_method_paths):
            if urlsplit(self.path).path in other_method_paths:
                self.respond(405, "application/json", json_bytes({"detail": "Method Not Allowed"}))
            else:
                self.respond(404, "application/json", json_bytes({"detail": "Not Found"}))

        def respond(self, status, content_type, body):
            self.send_response(status)
            self.send_header("content-type", content_type)
            if isinstance(body, bytes):
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)
                return
            self.send_header("transfer-encoding", "chunked")  # a streamed response, as StreamingResponse
            self.end_headers()
            with contextlib.closing(body):
                try:
                    for chunk in body:
                        if chunk:
                            self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                            self.wfile.flush()
                    self.wfile.write(b"0\r\n\r\n")
                except OSError:
                    self.close_connection = True  # the client went away; closing the stream releases it

        def log_request(self, code="-", size="-"):
            phrase = self.responses.get(int(code), ("",))[0] if str(code).isdigit() else ""
            host, port = self.client_address[:2]
            uvicorn_log("INFO", f'{host}:{port} - "{self.requestline}" {code} {phrase}')

        def log_message(self, format, *args):
            pass

    return Handler


def main():
    args = parse_args()
    setup_logging(args.log_level)
    pid = os.getpid()
    uvicorn_log("INFO", f"Started server process [{pid}]")
    uvicorn_log("INFO", "Waiting for application startup.")
    proxy = Proxy(args)
    NodeListener(proxy)
    snapshot = proxy.scheduler.snapshot()
    logger.info(
        "Initialized %s prefill clients and %s decode clients in worker %s.",
        len(snapshot["prefill_instances"]),
        len(snapshot["decode_instances"]),
        pid,
    )
    uvicorn_log("INFO", "Application startup complete.")
    try:
        server = ThreadingHTTPServer((args.host, args.port), handler_class(proxy))
    except OSError as exc:
        uvicorn_log("ERROR", f"[Errno {exc.errno}] error while attempting to bind on address "
                             f"({args.host!r}, {args.port}): {(exc.strerror or str(exc)).lower()}")
        uvicorn_log("INFO", "Waiting for application shutdown.")
        uvicorn_log("INFO", "Application shutdown complete.")
        sys.exit(1)
    server.daemon_threads = True
    stop = threading.Event()
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda *_: stop.set())
    threading.Thread(target=server.serve_forever, daemon=True).start()
    uvicorn_log("INFO", f"Uvicorn running on http://{args.host}:{args.port} (Press CTRL+C to quit)")
    while not stop.wait(0.5):
        pass
    uvicorn_log("INFO", "Shutting down")
    server.shutdown()
    server.server_close()
    uvicorn_log("INFO", "Waiting for application shutdown.")
    uvicorn_log("INFO", "Application shutdown complete.")
    uvicorn_log("INFO", f"Finished server process [{pid}]")


if __name__ == "__main__":
    main()
