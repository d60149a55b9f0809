"""load_balance_proxy_server_example.py against fake prefill/decode backends: the kv_transfer_params
handshake, headers, streaming, retries, error pass-through, least-loaded choice and admin endpoints.
"""
from __future__ import annotations

import json
import signal
import socket
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
import pytest

from tests.sim._standin import ROOTFS, base_env, free_port, procs, run, wait_until  # noqa: F401 (procs: fixture)

PROXY = str(ROOTFS / "vllm-workspace/vllm-ascend/examples/disaggregated_prefill_v1/load_balance_proxy_server_example.py")
KV_PARAMS = {"do_remote_prefill": True, "do_remote_decode": False, "remote_engine_id": "p0_dp0",
             "remote_block_ids": [1, 2, 3], "remote_host": "10.0.0.5", "remote_port": 36000}


class Backend:
    """A fake vLLM server: records each request and answers with ``reply(path, body)``."""

    def __init__(self, reply):
        self.requests: list[dict] = []
        self.reply = reply
        backend = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_GET(self):  # noqa: N802
                self.answer(None)

            def do_POST(self):  # noqa: N802
                length = int(self.headers.get("Content-Length") or 0)
                self.answer(json.loads(self.rfile.read(length) or b"null"))

            def answer(self, body):
                backend.requests.append({"path": self.path, "headers": dict(self.headers), "body": body})
                status, payload = backend.reply(self.path, body)
                self.send_response(status)
                if isinstance(payload, list):  # a stream of server-sent events
                    self.send_header("Content-Type", "text/event-stream")
                    self.send_header("Transfer-Encoding", "chunked")
                    self.end_headers()
                    for chunk in payload:
                        self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                    self.wfile.write(b"0\r\n\r\n")
                    return
                data = json.dumps(payload).encode()
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


def prefill_ok(path, body):
    if path.endswith("/models"):
        return 200, {"object": "list", "data": [{"id": "kimi-k3"}]}
    return 200, {"id": "cmpl-p", "choices": [{"index": 0, "text": "x"}], "kv_transfer_params": KV_PARAMS,
                 "usage": {"prompt_tokens": 10, "completion_tokens": 1, "prompt_tokens_details": {"cached_tokens": 4}}}


def decode_ok(path, body):
    if body and body.get("stream"):
        return 200, [b'data: {"choices":[{"index":0,"delta":{"content":"he"}}]}\n\n',
                     b'data: {"choices":[{"index":0,"delta":{"content":"llo"}}]}\n\n', b"data: [DONE]\n\n"]
    return 200, {"id": "cmpl-d", "choices": [{"index": 0, "text": "hello", "finish_reason": "length"}],
                 "usage": {"prompt_tokens": 10, "completion_tokens": 2, "prompt_tokens_details": None}}


@pytest.fixture
def backends():
    made: list[Backend] = []

    def make(reply):
        made.append(Backend(reply))
        return made[-1]

    yield make
    for backend in made:
        backend.close()


def start_proxy(procs, tmp_path, prefills, decodes, *extra, **env):
    port = free_port()
    args = [sys.executable, PROXY, "--host", "127.0.0.1", "--port", str(port), "--retry-delay", "0.001",
            "--prefiller-hosts", *["127.0.0.1"] * len(prefills), "--prefiller-ports", *[str(b) for b in prefills],
            "--decoder-hosts", *["127.0.0.1"] * len(decodes), "--decoder-ports", *[str(b) for b in decodes], *extra]
    proc = procs(args, base_env(tmp_path, **env))
    proc.wait_output("Uvicorn running on", stream="err")
    return proc, httpx.Client(base_url=f"http://127.0.0.1:{port}", trust_env=False, timeout=5)


def test_prefill_then_decode_handshake(backends, procs, tmp_path):
    p, d0, d1 = backends(prefill_ok), backends(decode_ok), backends(decode_ok)
    proc, client = start_proxy(procs, tmp_path, [p.port], [d0.port, d1.port], OPENAI_API_KEY="sk-test")
    assert "Initialized 1 prefill clients and 2 decode clients in worker" in proc.err
    request = {"model": "kimi-k3", "prompt": "hello", "max_tokens": 5, "stream_options": {"include_usage": True}}
    response = client.post("/v1/completions", json=request)
    assert response.status_code == 200
    assert response.json()["choices"][0]["text"] == "hello"
    assert response.json()["usage"]["prompt_tokens_details"] == {"cached_tokens": 4}
    [prefill] = p.requests
    assert prefill["path"] == "/v1/completions"
    assert prefill["body"] == {"model": "kimi-k3", "prompt": "hello", "max_tokens": 1, "min_tokens": 1, "stream": False,
                               "kv_transfer_params": {"do_remote_decode": True, "do_remote_prefill": False,
                                                      "remote_engine_id": None, "remote_block_ids": None,
                                                      "remote_host": None, "remote_port": None}}
    [decode] = d0.requests  # both decoders idle: the first one
    assert decode["body"] == {**request, "kv_transfer_params": KV_PARAMS}
    assert prefill["headers"]["X-Request-Id"] == decode["headers"]["X-Request-Id"]
    assert prefill["headers"]["Authorization"] == decode["headers"]["Authorization"] == "Bearer sk-test"


def test_chat_streaming_is_relayed(backends, procs, tmp_path):
    p, d = backends(prefill_ok), backends(decode_ok)
    _, client = start_proxy(procs, tmp_path, [p.port], [d.port])
    request = {"model": "kimi-k3", "messages": [{"role": "user", "content": "hi"}], "stream": True,
               "max_completion_tokens": 9}
    with client.stream("POST", "/v1/chat/completions", json=request) as response:
        assert response.headers["content-type"] == "text/event-stream; charset=utf-8"
        body = response.read()
    assert body == b"".join(decode_ok("", {"stream": True})[1])
    assert p.requests[0]["path"] == "/v1/chat/completions"
    assert p.requests[0]["body"]["stream"] is False and p.requests[0]["body"]["max_completion_tokens"] == 1
    assert d.requests[0]["body"]["stream"] is True and d.requests[0]["headers"]["Authorization"] == "Bearer None"


def test_prefill_400_is_passed_through_without_retry(backends, procs, tmp_path):
    p = backends(lambda path, body: (400, {"object": "error", "message": "prompt too long", "code": 400}))
    d = backends(decode_ok)
    _, client = start_proxy(procs, tmp_path, [p.port], [d.port])
    response = client.post("/v1/completions", json={"model": "kimi-k3", "prompt": "x"})
    assert (response.status_code, response.json()["message"]) == (400, "prompt too long")
    assert len(p.requests) == 1 and d.requests == []


def test_prefill_5xx_is_retried_then_passed_through(backends, procs, tmp_path):
    p = backends(lambda path, body: (503, {"error": "overloaded"}))
    d = backends(decode_ok)
    proc, client = start_proxy(procs, tmp_path, [p.port], [d.port], "--max-retries", "3")
    response = client.post("/v1/completions", json={"model": "kimi-k3", "prompt": "x"})
    assert (response.status_code, response.json()) == (503, {"error": "overloaded"})
    assert len(p.requests) == 3
    assert "Attempt 1 failed for /completions" in proc.err and "Attempt 2 failed" in proc.err


def test_unreachable_prefill_is_an_internal_error(backends, procs, tmp_path):
    d = backends(decode_ok)
    proc, client = start_proxy(procs, tmp_path, [free_port()], [d.port], "--max-retries", "2")
    response = client.post("/v1/completions", json={"model": "kimi-k3", "prompt": "x"})
    assert (response.status_code, response.text) == (500, "Internal Server Error")
    assert "Error occurred in disagg prefill proxy server - /completions endpoint" in proc.out
    assert client.get("/healthcheck").json()["request_num"] == 0  # the failed request released its slot


def test_decode_failure_ends_the_stream_and_is_logged(backends, procs, tmp_path):
    p, d = backends(prefill_ok), backends(lambda path, body: (500, {"error": "boom"}))
    proc, client = start_proxy(procs, tmp_path, [p.port], [d.port], "--max-retries", "1")
    response = client.post("/v1/completions", json={"model": "kimi-k3", "prompt": "x"})
    assert (response.status_code, response.content) == (200, b"")  # the status was sent before decoding began
    wait_until(lambda: "Error during streaming from decoder 127.0.0.1" in proc.err)


def test_least_loaded_decoder_takes_the_next_request(backends, procs, tmp_path):
    release = threading.Event()

    def slow(path, body):
        release.wait(3)
        return decode_ok(path, body)

    p, d0, d1 = backends(prefill_ok), backends(slow), backends(decode_ok)
    _, client = start_proxy(procs, tmp_path, [p.port], [d0.port, d1.port])
    first = threading.Thread(target=client.post, args=("/v1/completions",), kwargs={"json": {"prompt": "a" * 50}})
    first.start()
    try:
        wait_until(lambda: d0.requests)
        assert client.get("/healthcheck").json()["request_num"] == 1
        assert client.post("/v1/completions", json={"prompt": "b"}).status_code == 200
        assert len(d1.requests) == 1 and len(d0.requests) == 1
    finally:
        release.set()
        first.join(5)


def test_proxy_variables_in_the_environment_are_honoured(backends, procs, tmp_path):
    p, d = backends(prefill_ok), backends(decode_ok)
    dead_proxy = f"http://127.0.0.1:{free_port()}"
    _, client = start_proxy(procs, tmp_path, [p.port], [d.port], "--max-retries", "1", http_proxy=dead_proxy)
    assert client.post("/v1/completions", json={"prompt": "x"}).status_code == 500
    assert p.requests == []
    _, client = start_proxy(procs, tmp_path, [p.port], [d.port], http_proxy=dead_proxy, no_proxy="127.0.0.1")
    assert client.post("/v1/completions", json={"prompt": "x"}).status_code == 200


def test_healthcheck_models_and_reset_prefix_cache(backends, procs, tmp_path):
    broken = threading.Event()
    p = backends(lambda path, body: (500, {}) if broken.is_set() else prefill_ok(path, body))
    d = backends(decode_ok)
    _, client = start_proxy(procs, tmp_path, [p.port], [d.port])
    assert client.get("/healthcheck").json() == {"status": "ok", "prefill_instances": 1, "decode_instances": 1,
                                                 "request_num": 0}
    assert client.get("/v1/models").json()["data"] == [{"id": "kimi-k3"}]
    assert client.post("/reset_prefix_cache?reset_running_requests=true").status_code == 200
    assert [r["path"] for r in p.requests + d.requests][-2:] == ["/reset_prefix_cache?reset_running_requests=true"] * 2
    broken.set()
    failed = client.post("/reset_prefix_cache")
    assert failed.status_code == 500 and failed.json() == {"failed": [f"http://127.0.0.1:{p.port}"]}


def test_models_without_live_backends(procs, tmp_path):
    _, client = start_proxy(procs, tmp_path, [free_port()], [free_port()])
    response = client.get("/v1/models")
    assert response.status_code == 503
    assert response.json()["error"] == "All backend instances failed to serve /v1/models"


def test_instances_add_and_remove(backends, procs, tmp_path):
    p, d0, d1 = backends(prefill_ok), backends(decode_ok), backends(decode_ok)
    proc, client = start_proxy(procs, tmp_path, [p.port], [d0.port], "--waiting-retry-interval", "0.1")
    added = client.post("/instances/add", json={"type": "decode", "instances": f"127.0.0.1:{d1.port}"}).json()
    assert added["message"] == f"Instances ['127.0.0.1:{d1.port}'] are waiting to be added."
    wait_until(lambda: client.get("/healthcheck").json()["decode_instances"] == 2, timeout=3)
    assert f"Checking instance 0.0.0.0:{d1.port}..." in proc.out
    removed = client.post("/instances/remove", json={"type": "decode", "instances": [f"127.0.0.1:{d0.port}"]}).json()
    assert removed["current_decode_instances"] == [f"127.0.0.1:{d1.port}"]
    bad = client.post("/instances/add", json={"type": "mixed", "instances": []}).json()
    assert bad == {"error": "Instance type 'mixed' is not supported. Only 'prefill' and 'decode' are allowed."}


def test_mismatched_hosts_and_ports(tmp_path):
    done = run([sys.executable, PROXY, "--decoder-hosts", "a", "b", "--decoder-ports", "1"], base_env(tmp_path))
    assert done.returncode == 1
    assert "ValueError: Number of decoder hosts must match number of decoder ports" in done.stderr


def test_busy_port_and_clean_stop(backends, procs, tmp_path):
    p, d = backends(prefill_ok), backends(decode_ok)
    proc, client = start_proxy(procs, tmp_path, [p.port], [d.port])
    port = client.base_url.port
    again = run([sys.executable, PROXY, "--host", "127.0.0.1", "--port", str(port)], base_env(tmp_path))
    assert again.returncode == 1 and "error while attempting to bind on address ('127.0.0.1'" in again.stderr
    assert proc.stop(signal.SIGTERM, timeout=3) == 0
    assert f"Finished server process [{proc.popen.pid}]" in proc.err
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", port), timeout=0.5)
