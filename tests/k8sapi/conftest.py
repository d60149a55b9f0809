"""A real Kubernetes API server for the k8s target's manifests: ``apiextensions-apiserver`` (the Kubernetes
apiserver library serving CustomResourceDefinitions and their resources, built from Debian's sources by
``.ci/k8sapi-build``) on etcd, both started here on 127.0.0.1 with a temporary directory and stopped at the end.

It has no core API (no Pods, Namespaces, Services, exec) and no admission webhooks: what it checks for real is
the LeaderWorkerSet CRD (tests/fixtures/k8s/) as the API server applies it: structural schema, strict field
validation, defaulting, the status subresource, storage in etcd. Runs when ``K3LAB_K8SAPI_BIN`` names the
folder with both binaries (``nox -s k8sapi`` sets it from the build script); skipped without it.
"""
from __future__ import annotations

import datetime
import ipaddress
import os
import socket
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import requests
import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

ROOT = Path(__file__).resolve().parents[2]
CRD = ROOT / "tests" / "fixtures" / "k8s" / "leaderworkerset.x-k8s.io_leaderworkersets.yaml"
START_DEADLINE = 90.0  # seconds for etcd and the API server to be ready (a loaded 2-core CI machine)
ESTABLISH_DEADLINE = 30.0  # seconds for the CRD to be Established
# Admission plugins that read the core API or admission configuration objects, neither of which this server
# serves (with them on, every write would wait for informers that never sync).
DISABLED_ADMISSION = ("NamespaceLifecycle,MutatingAdmissionWebhook,ValidatingAdmissionWebhook,"
                      "ValidatingAdmissionPolicy,MutatingAdmissionPolicy")


@dataclass(frozen=True)
class Api:
    """The running server: ``base`` URL and a requests session that trusts its CA and presents a client
    certificate in ``system:masters`` (authorized by the server's privileged-group rule, no RBAC needed)."""
    base: str
    http: requests.Session
    logs: Path
    kubeconfig: Path  # context ``self``: the same server, CA and client certificate, for the kit's own client

    def url(self, path: str) -> str:
        return self.base + path


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _pem_key(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def _cert(subject: x509.Name, key: ec.EllipticCurvePrivateKey, issuer: x509.Name,
          issuer_key: ec.EllipticCurvePrivateKey, *, ca: bool = False,
          ip: str | None = None) -> x509.Certificate:
    now = datetime.datetime.now(datetime.timezone.utc)
    b = (x509.CertificateBuilder().subject_name(subject).issuer_name(issuer).public_key(key.public_key())
         .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(minutes=5))
         .not_valid_after(now + datetime.timedelta(days=1))
         .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
         # the key identifiers and usages strict X.509 verification (Python 3.13's default) requires
         .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
         .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(issuer_key.public_key()), critical=False)
         .add_extension(x509.KeyUsage(digital_signature=not ca, key_cert_sign=ca, crl_sign=ca,
                                      content_commitment=False, key_encipherment=False, data_encipherment=False,
                                      key_agreement=False, encipher_only=False, decipher_only=False), critical=True))
    if ip:
        b = b.add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address(ip))]), critical=False)
    return b.sign(issuer_key, hashes.SHA256())


def _write_pki(d: Path) -> dict[str, Path]:
    """A throwaway CA, the server's serving certificate for 127.0.0.1 and a system:masters client certificate."""
    ca_key, srv_key, cli_key = _key(), _key(), _key()
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "k3lab-tests-ca")])
    files = {
        "ca": _cert(ca_name, ca_key, ca_name, ca_key, ca=True),
        "srv": _cert(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")]), srv_key, ca_name, ca_key,
                     ip="127.0.0.1"),
        "cli": _cert(x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, "system:masters"),
                                x509.NameAttribute(NameOID.COMMON_NAME, "k3lab-tests")]), cli_key, ca_name, ca_key),
    }
    out = {}
    for name, cert in files.items():
        out[name] = d / f"{name}.crt"
        out[name].write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    for name, key in (("srv", srv_key), ("cli", cli_key)):
        out[f"{name}_key"] = d / f"{name}.key"
        out[f"{name}_key"].write_bytes(_pem_key(key))
    return out


def _kubeconfig(d: Path, server: str, pki: dict[str, Path]) -> Path:
    """The server's own address: it reads its delegated authentication/authorization and core informers through
    a kubeconfig, and there is no other API server to point them at."""
    path = d / "kubeconfig"
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "self",
        "clusters": [{"name": "self", "cluster": {"server": server, "certificate-authority": str(pki["ca"])}}],
        "users": [{"name": "self", "user": {"client-certificate": str(pki["cli"]),
                                            "client-key": str(pki["cli_key"])}}],
        "contexts": [{"name": "self", "context": {"cluster": "self", "user": "self"}}],
    }))
    return path


def _tail(path: Path, lines: int = 25) -> str:
    return "\n".join(path.read_text(errors="replace").splitlines()[-lines:]) if path.exists() else "(no log)"


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=15)


def _wait_ready(http: requests.Session, url: str, procs: dict[str, tuple[subprocess.Popen[bytes], Path]]) -> None:
    deadline = time.monotonic() + START_DEADLINE
    last = ""
    while time.monotonic() < deadline:
        for name, (proc, log) in procs.items():
            if proc.poll() is not None:
                pytest.fail(f"{name} exited with {proc.returncode}:\n{_tail(log)}")
        try:
            r = http.get(url, timeout=5)
            if r.status_code == 200:
                return
            last = f"{r.status_code} {r.text[-500:]}"
        except requests.RequestException as e:
            last = str(e)
        time.sleep(0.5)
    pytest.fail(f"the API server was not ready within {START_DEADLINE:.0f} s: {last}\n"
                f"{_tail(procs['apiextensions-apiserver'][1])}")


@pytest.fixture(scope="session")
def api(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Api]:
    env = os.environ.get("K3LAB_K8SAPI_BIN")
    if not env:
        pytest.skip("K3LAB_K8SAPI_BIN is not set: build the server with .ci/k8sapi-build (nox -s k8sapi does)")
    bin_dir = Path(env)
    for exe in ("etcd", "apiextensions-apiserver"):
        if not os.access(bin_dir / exe, os.X_OK):
            pytest.fail(f"K3LAB_K8SAPI_BIN={bin_dir}: no executable {exe} (run .ci/k8sapi-build)")
    d = tmp_path_factory.mktemp("k8sapi")
    pki = _write_pki(d)
    etcd_client, etcd_peer, port = _free_port(), _free_port(), _free_port()
    base = f"https://127.0.0.1:{port}"
    etcd_url, peer_url = f"http://127.0.0.1:{etcd_client}", f"http://127.0.0.1:{etcd_peer}"
    procs: dict[str, tuple[subprocess.Popen[bytes], Path]] = {}
    try:
        log = d / "etcd.log"
        with log.open("wb") as out:
            procs["etcd"] = (subprocess.Popen(
                [str(bin_dir / "etcd"), "--name", "k3lab", "--data-dir", str(d / "etcd"),
                 "--listen-client-urls", etcd_url, "--advertise-client-urls", etcd_url,
                 "--listen-peer-urls", peer_url, "--initial-advertise-peer-urls", peer_url,
                 "--initial-cluster", f"k3lab={peer_url}"],
                stdout=out, stderr=subprocess.STDOUT), log)
        kubeconfig = _kubeconfig(d, base, pki)
        log = d / "apiserver.log"
        with log.open("wb") as out:
            procs["apiextensions-apiserver"] = (subprocess.Popen(
                [str(bin_dir / "apiextensions-apiserver"), "--etcd-servers", etcd_url,
                 "--bind-address", "127.0.0.1", "--secure-port", str(port), "--cert-dir", str(d / "certs"),
                 "--tls-cert-file", str(pki["srv"]), "--tls-private-key-file", str(pki["srv_key"]),
                 "--client-ca-file", str(pki["ca"]), "--kubeconfig", str(kubeconfig),
                 "--authentication-kubeconfig", str(kubeconfig), "--authorization-kubeconfig", str(kubeconfig),
                 "--authentication-skip-lookup", "--enable-priority-and-fairness=false",
                 "--disable-admission-plugins", DISABLED_ADMISSION],
                stdout=out, stderr=subprocess.STDOUT), log)
        http = requests.Session()
        http.trust_env = False  # REQUESTS_CA_BUNDLE would override verify below, and no proxy for 127.0.0.1
        http.verify = str(pki["ca"])
        http.cert = (str(pki["cli"]), str(pki["cli_key"]))
        # informer-sync waits for the core API's Services (conversion webhooks' resolver), which this server
        # does not serve: every other readiness check (etcd, the CRD controllers and informers) must pass
        _wait_ready(http, f"{base}/readyz?exclude=informer-sync", procs)
        yield Api(base, http, log, kubeconfig)
    finally:
        for proc, _ in reversed(list(procs.values())):
            _stop(proc)


LWS_CRD_PATH = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"


@pytest.fixture(scope="session")
def lws_crd(api: Api) -> dict[str, Any]:
    """The real LWS CRD installed and Established; its stored object."""
    crd = yaml.safe_load(CRD.read_text())
    r = api.http.post(api.url(LWS_CRD_PATH), json=crd, params={"fieldValidation": "Strict"}, timeout=30)
    assert r.status_code == 201, r.text
    deadline = time.monotonic() + ESTABLISH_DEADLINE
    while True:
        got = api.http.get(api.url(f"{LWS_CRD_PATH}/{crd['metadata']['name']}"), timeout=10).json()
        conditions = {c["type"]: c["status"] for c in (got.get("status") or {}).get("conditions") or []}
        if conditions.get("Established") == "True":
            return dict(got)
        if time.monotonic() > deadline:
            pytest.fail(f"the LWS CRD was not Established within {ESTABLISH_DEADLINE:.0f} s: {conditions}")
        time.sleep(0.2)
