"""A real kube-apiserver + etcd (+ kube-controller-manager) on loopback: envtest's way.

When ``KUBEBUILDER_ASSETS`` names a directory holding ``kube-apiserver`` and ``etcd``
(and, optionally, ``kube-controller-manager``), :func:`start_control_plane` starts them
as child processes bound to 127.0.0.1 with a throw-away PKI:

* a CA, the API server's serving certificate (SANs 127.0.0.1 and localhost) and the
  service-account signing key pair;
* a static token file with an admin (``system:masters``), the service's own identity
  (``system:serviceaccount:quartermaster-system:quartermaster``, so the shipped RBAC is
  what authorizes it) and an unprivileged user;
* RBAC authorization (``--authorization-mode=Node,RBAC``), as in a real cluster;
* the aggregation layer: a front-proxy PKI (``--requestheader-client-ca-file``,
  ``--proxy-client-cert-file``/``-key-file``, allowed name ``front-proxy-client``, the
  ``X-Remote-*`` headers) and ``--enable-aggregator-routing``, so an APIService's
  Service is resolved through its EndpointSlices to an endpoint address: there is no
  kube-proxy here to route a ClusterIP, and EndpointSlice validation (like the core
  Endpoints') refuses loopback addresses ("may not be in the loopback range"), so the
  endpoint is this machine's own non-loopback address (:func:`node_address`), as a
  pod's address would be in a cluster.

The kube-controller-manager, when present, runs the controllers the service relies on
in a cluster: the Job controller (pods for started Jobs, deleted on suspend), the
StatefulSet, Deployment and ReplicaSet controllers (pods of the kinds admitted through
their pods), the garbage collector (Workloads of deleted Jobs) and the namespace
controller, each under its own service account (``--use-service-account-credentials``,
as kubeadm runs them). The service's Workload webhook lets only the garbage collector
(``system:serviceaccount:kube-system:generic-garbage-collector``) and the service drop
a Workload's controller reference: run as the harness's admin, the collector could
not orphan a Workload, and a Job deleted with ``propagationPolicy: Orphan`` would stay.

Nothing here builds or fetches anything: the project only *uses* what
``KUBEBUILDER_ASSETS`` points at (see README, "Testing against a real API server").
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import ssl
import subprocess
import tempfile
import time
import urllib.request
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa

from admission.apiserver_double.certs import make_serving_cert

ASSETS_ENV = "KUBEBUILDER_ASSETS"
ADMIN_TOKEN = "real-admin-token"
SERVICE_TOKEN = "real-service-token"
USER_TOKEN = "real-user-token"
SERVICE_USER = "system:serviceaccount:quartermaster-system:quartermaster"
FRONT_PROXY_NAME = "front-proxy-client"


def assets_dir() -> Path | None:
    """The ``KUBEBUILDER_ASSETS`` directory when it holds kube-apiserver and etcd."""
    raw = os.environ.get(ASSETS_ENV)
    if not raw:
        return None
    path = Path(raw)
    if all(os.access(path / b, os.X_OK) for b in ("kube-apiserver", "etcd")):
        return path
    return None


def skip_reason() -> str:
    raw = os.environ.get(ASSETS_ENV)
    if not raw:
        return f"real API server tests need {ASSETS_ENV}=DIR with kube-apiserver and etcd"
    return f"{ASSETS_ENV}={raw} does not hold executable kube-apiserver and etcd"


def node_address() -> str | None:
    """This machine's primary non-loopback IPv4 address (the source address of its
    default route; a UDP connect sends nothing), or None without one."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            s.connect(("198.51.100.1", 9))  # TEST-NET-2: only the route is looked up
        except OSError:
            return None
        addr = str(s.getsockname()[0])
    return None if addr.startswith("127.") else addr


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class ControlPlane:
    """A running control plane; :meth:`stop` ends every process and removes its files."""

    url: str
    ca_pem: bytes
    workdir: Path
    etcd_url: str = ""
    processes: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    controller_manager: bool = False

    def ssl_context(self) -> ssl.SSLContext:
        return ssl.create_default_context(cadata=self.ca_pem.decode())

    def log(self, name: str) -> str:
        path = self.workdir / f"{name}.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def kubeconfig(self, token: str = ADMIN_TOKEN, *, name: str = "admin") -> Path:
        path = self.workdir / f"{name}.kubeconfig"
        if not path.exists():
            _write_kubeconfig(path, self.url, self.workdir / "ca.crt", token)
        return path

    def stop(self) -> None:
        for name in ("kube-controller-manager", "kube-apiserver", "etcd"):
            proc = self.processes.pop(name, None)
            if proc is None:
                continue
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=5)
        shutil.rmtree(self.workdir, ignore_errors=True)


def _write_kubeconfig(path: Path, url: str, ca: Path, token: str) -> None:
    path.write_text(
        "apiVersion: v1\nkind: Config\n"
        f"clusters:\n- name: real\n  cluster:\n    server: {url}\n"
        f"    certificate-authority: {ca}\n"
        f"users:\n- name: user\n  user:\n    token: {token}\n"
        "contexts:\n- name: real\n  context:\n    cluster: real\n    user: user\n"
        "    namespace: default\ncurrent-context: real\n"
    )


def _pem_key(key: rsa.RSAPrivateKey | ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def _write_pki(d: Path) -> bytes:
    serving = make_serving_cert(["localhost", "kubernetes.default.svc"], ip_addresses=["127.0.0.1"])
    (d / "ca.crt").write_bytes(serving.ca_pem)
    (d / "apiserver.crt").write_bytes(serving.cert_pem)
    (d / "apiserver.key").write_bytes(serving.key_pem)
    sa = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    (d / "sa.key").write_bytes(_pem_key(sa))
    (d / "sa.pub").write_bytes(
        sa.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )
    # A client certificate is not needed (tokens authenticate everyone), but the
    # apiserver wants a CA for client certificates to validate kubelet-style clients.
    (d / "client-ca.crt").write_bytes(_self_signed_ca())
    from admission.apiserver_double.certs import make_client_cert

    proxy = make_client_cert(FRONT_PROXY_NAME)
    (d / "front-proxy-ca.crt").write_bytes(proxy.ca_pem)
    (d / "front-proxy-client.crt").write_bytes(proxy.cert_pem)
    (d / "front-proxy-client.key").write_bytes(proxy.key_pem)
    (d / "tokens.csv").write_text(
        f'{ADMIN_TOKEN},admin,admin-uid,"system:masters"\n'
        f'{SERVICE_TOKEN},{SERVICE_USER},sa-uid,"system:serviceaccounts,'
        'system:serviceaccounts:quartermaster-system"\n'
        f"{USER_TOKEN},alice,alice-uid\n"
    )
    return serving.ca_pem


def _self_signed_ca() -> bytes:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(x509.NameOID.COMMON_NAME, "client-ca")])
    now = datetime.now(UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - timedelta(minutes=5))
        .not_valid_after(now + timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    return cert.public_bytes(serialization.Encoding.PEM)


def _spawn(name: str, cmd: list[str], workdir: Path) -> subprocess.Popen[bytes]:
    log = (workdir / f"{name}.log").open("ab")
    return subprocess.Popen(
        cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=workdir
    )


def _wait(what: str, probe, proc: subprocess.Popen[bytes], cp: ControlPlane, timeout: float):  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{what} exited with {proc.returncode}:\n{cp.log(what)[-4000:]}")
        with contextlib.suppress(Exception):
            if probe():
                return
        time.sleep(0.2)
    raise RuntimeError(f"{what} did not become ready in {timeout:.0f}s:\n{cp.log(what)[-4000:]}")


def start_control_plane(
    assets: Path, *, controller_manager: bool | None = None, priority_and_fairness: bool = False
) -> ControlPlane:
    """Start etcd, kube-apiserver and (when its binary is there) kube-controller-manager.

    ``priority_and_fairness``: API Priority and Fairness on, as real clusters run it
    (off by default here: the tests' control plane limits requests by max-in-flight)."""
    base = Path("/dev/shm") if Path("/dev/shm").is_dir() else None
    workdir = Path(tempfile.mkdtemp(prefix="qm-real-", dir=base))
    ca_pem = _write_pki(workdir)
    etcd_port, peer_port, api_port = free_port(), free_port(), free_port()
    url = f"https://127.0.0.1:{api_port}"
    cp = ControlPlane(url=url, ca_pem=ca_pem, workdir=workdir)
    try:
        etcd_url = f"http://127.0.0.1:{etcd_port}"
        cp.etcd_url = etcd_url
        cp.processes["etcd"] = _spawn(
            "etcd",
            [
                str(assets / "etcd"),
                f"--data-dir={workdir / 'etcd'}",
                f"--listen-client-urls={etcd_url}",
                f"--advertise-client-urls={etcd_url}",
                f"--listen-peer-urls=http://127.0.0.1:{peer_port}",
                f"--initial-advertise-peer-urls=http://127.0.0.1:{peer_port}",
                f"--initial-cluster=default=http://127.0.0.1:{peer_port}",
                "--name=default",
                "--log-level=warn",
            ],
            workdir,
        )
        _wait(
            "etcd",
            lambda: urllib.request.urlopen(f"{etcd_url}/health", timeout=1).status == 200,
            cp.processes["etcd"],
            cp,
            30,
        )
        cp.processes["kube-apiserver"] = _spawn(
            "kube-apiserver",
            [
                str(assets / "kube-apiserver"),
                f"--etcd-servers={etcd_url}",
                "--bind-address=127.0.0.1",
                "--advertise-address=127.0.0.1",
                f"--secure-port={api_port}",
                f"--tls-cert-file={workdir / 'apiserver.crt'}",
                f"--tls-private-key-file={workdir / 'apiserver.key'}",
                f"--client-ca-file={workdir / 'client-ca.crt'}",
                f"--token-auth-file={workdir / 'tokens.csv'}",
                f"--service-account-key-file={workdir / 'sa.pub'}",
                f"--service-account-signing-key-file={workdir / 'sa.key'}",
                "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
                "--service-cluster-ip-range=10.0.0.0/24",
                "--authorization-mode=Node,RBAC",
                f"--requestheader-client-ca-file={workdir / 'front-proxy-ca.crt'}",
                f"--requestheader-allowed-names={FRONT_PROXY_NAME}",
                "--requestheader-username-headers=X-Remote-User",
                "--requestheader-group-headers=X-Remote-Group",
                "--requestheader-extra-headers-prefix=X-Remote-Extra-",
                f"--proxy-client-cert-file={workdir / 'front-proxy-client.crt'}",
                f"--proxy-client-key-file={workdir / 'front-proxy-client.key'}",
                "--enable-aggregator-routing=true",
                "--allow-privileged=true",
                # no kubelet creates the namespaces' default ServiceAccounts' tokens here
                "--disable-admission-plugins=ServiceAccount",
                f"--enable-priority-and-fairness={str(priority_and_fairness).lower()}",
                "--storage-backend=etcd3",
                "--v=0",
            ],
            workdir,
        )
        ctx = cp.ssl_context()

        def ready() -> bool:
            req = urllib.request.Request(
                f"{url}/readyz", headers={"Authorization": f"Bearer {ADMIN_TOKEN}"}
            )
            return urllib.request.urlopen(req, context=ctx, timeout=2).status == 200

        _wait("kube-apiserver", ready, cp.processes["kube-apiserver"], cp, 90)
        want_kcm = (
            os.access(assets / "kube-controller-manager", os.X_OK)
            if controller_manager is None
            else controller_manager
        )
        if want_kcm:
            kubeconfig = cp.kubeconfig()
            cp.processes["kube-controller-manager"] = _spawn(
                "kube-controller-manager",
                [
                    str(assets / "kube-controller-manager"),
                    f"--kubeconfig={kubeconfig}",
                    f"--authentication-kubeconfig={kubeconfig}",
                    f"--authorization-kubeconfig={kubeconfig}",
                    "--controllers=job,statefulset,deployment,replicaset,garbage-collector-controller,"
                    "namespace-controller,serviceaccount-controller",
                    f"--service-account-private-key-file={workdir / 'sa.key'}",
                    f"--root-ca-file={workdir / 'ca.crt'}",
                    # each controller under its own service account, as kubeadm runs
                    # them: the service's webhooks know the garbage collector by that name
                    "--use-service-account-credentials=true",
                    "--leader-elect=false",
                    "--bind-address=127.0.0.1",
                    f"--secure-port={free_port()}",
                    "--concurrent-job-syncs=10",
                    "--v=0",
                ],
                workdir,
            )
            cp.controller_manager = True
            time.sleep(0.5)
            if cp.processes["kube-controller-manager"].poll() is not None:
                raise RuntimeError(
                    "kube-controller-manager exited:\n" + cp.log("kube-controller-manager")[-4000:]
                )
        return cp
    except BaseException:
        cp.stop()
        raise
