"""The fourth pass's signatures (one cause as a wrapper or another project words it, built lines in
tests/fixtures/upstream_lines/sig9-vllm4.yaml) left alone by the lines near them that report no failure: retry
warnings on the way to a hub that may still answer, a free port looked for, a segment created, a placement group
waited for.
"""
from __future__ import annotations

import pytest

from k3lab.diagnosis import catalogue

CAT = catalogue.load()

# each built from the statement named beside it (not real log lines), with the cause whose signatures must not match
NEAR = [
    # huggingface_hub utils/_http.py http_backoff: logger.warning(f"'{err}' thrown while requesting {method} {url}")
    # (it retries; a cached file may still serve)
    ("hf-hub-unreachable",
     "'(MaxRetryError(\"HTTPSConnectionPool(host='huggingface.co', port=443): Max retries exceeded with url: "
     "/Qwen/Qwen3-8B/resolve/main/config.json (Caused by ConnectTimeoutError(<urllib3.connection.HTTPSConnection "
     "object at 0x7f3a1c2b4d90>, 'Connection to huggingface.co timed out. (connect timeout=10)'))\"), '(Request ID: "
     "1)')' thrown while requesting HEAD https://huggingface.co/Qwen/Qwen3-8B/resolve/main/config.json"),
    # urllib3 connectionpool.py urlopen: log.warning("Retrying (%r) after connection broken by '%r': %s", ...)
    ("hf-hub-unreachable",
     "WARNING:urllib3.connectionpool:Retrying (Retry(total=4, connect=None, read=None, redirect=None, status=None)) "
     "after connection broken by 'ConnectTimeoutError(<urllib3.connection.HTTPSConnection object at 0x7f3a1c2b4d90>, "
     "'Connection to huggingface.co timed out. (connect timeout=10)')': /api/models/Qwen/Qwen3-8B"),
    # a host that only begins like the Hub's
    ("hf-hub-unreachable",
     "requests.exceptions.ConnectionError: HTTPSConnectionPool(host='huggingface.co.example.org', port=443): Max "
     "retries exceeded with url: /x"),
    # a free port looked for (vLLM's get_open_port style), a port reported free
    ("port-in-use", "INFO 05-06 10:00:00 [utils.py:512] Port 8000 is not available, trying port 8001"),
    ("port-in-use", "INFO Port 8000 is available"),
    # a segment made, and a note about one
    ("shm-too-small", "node0:1:2 [0] NCCL INFO Creating shared memory segment /dev/shm/nccl-Ab12Cd (size 9637888)"),
    ("shm-too-small", "[info] Shared memory created for device 0"),
    # a model file found
    ("model-files-missing", "2026-05-06 10:00:00.000 1 root INFO Successfully loaded model file /mnt/models/model.joblib"),
    # a loader that will download what it did not find (not raised)
    ("model-files-missing", "No local weights found, DeepFace may try downloading..."),
    # vLLM's ray_utils while it waits (it may still be placed)
    ("ray-placement-unsatisfiable",
     "INFO 05-06 10:00:00 ray_utils.py:200] Waiting for creating a placement group of specs for 10 seconds. specs="
     "[{'GPU': 1.0}]. Check `ray status` to see if you have enough resources."),
    # a healthy AutoConfig call in a traceback of something else names the function, not the lookup's source line
    ("transformers-too-old",
     '  File "/usr/lib/python3/site-packages/transformers/models/auto/configuration_auto.py", line 1022, in '
     'from_pretrained'),
]


@pytest.mark.parametrize(("cause", "line"), NEAR, ids=range(len(NEAR)))
def test_a_line_near_a_new_wording_matches_no_signature_of_its_cause(cause, line):
    assert not any(s.regex.search(line.encode()) for s in CAT.get(cause).signatures), (cause, line)
