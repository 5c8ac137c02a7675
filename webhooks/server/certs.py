"""TLS material for the webhook server: generate, store, load, reload, rotate.

The API server only talks to admission webhooks over TLS and verifies the serving
certificate against the ``caBundle`` of the webhook configuration. Two deployment
modes exist, as in Kueue (docs/semantics.md §3.2):

* **cert-manager** (or any external issuer) writes ``tls.crt``/``tls.key`` into the
  cert directory; we load them and pick up rotated files by polling their mtimes
  (:class:`ReloadingSSLContext`).
* **self-managed**: we generate a CA and a serving certificate with the Service's DNS
  names (:func:`generate_certificates`), keep them in a Secret (:func:`secret_from_bundle`
  / :func:`bundle_from_secret` build and read the Secret body; the Kubernetes I/O lives
  in the controller), re-issue them before expiry (:func:`needs_rotation`,
  :func:`rotate_if_needed`) and patch the CA into the webhook configurations
  (:func:`ca_bundle_patch`).

Everything here is pure except the cert-directory helpers, which touch only files.
Only TLS 1.2 and newer are accepted.
"""

from __future__ import annotations

import base64
import ipaddress
import os
import ssl
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

CA_CERT_FILE = "ca.crt"
CA_KEY_FILE = "ca.key"  # only in the Secret, never in the serving cert dir
TLS_CERT_FILE = "tls.crt"
TLS_KEY_FILE = "tls.key"

DEFAULT_SERVICE = "quartermaster-webhook-service"
DEFAULT_NAMESPACE = "quartermaster-system"
DEFAULT_SECRET = "quartermaster-webhook-server-cert"
CA_COMMON_NAME = "quartermaster-ca"
CA_ORGANIZATION = "quartermaster"
LOCAL_DNS_NAMES: tuple[str, ...] = ("localhost",)
LOCAL_IP_ADDRESSES: tuple[str, ...] = ("127.0.0.1",)

CA_VALIDITY = timedelta(days=3650)
SERVING_VALIDITY = timedelta(days=365)
ROTATION_THRESHOLD = timedelta(days=30)
_BACKDATE = timedelta(minutes=5)  # tolerate clock skew between us and the API server


class CertError(ValueError):
    """Certificate material is missing, unreadable or inconsistent."""


@dataclass(frozen=True, slots=True)
class CertBundle:
    """PEM-encoded CA and serving certificate with their keys.

    ``ca_key_pem`` is ``None`` when the CA is external (cert-manager): then the bundle
    can be served but not rotated by us.
    """

    ca_cert_pem: bytes
    cert_pem: bytes
    key_pem: bytes
    ca_key_pem: bytes | None = None

    @property
    def ca_cert(self) -> x509.Certificate:
        return x509.load_pem_x509_certificate(self.ca_cert_pem)

    @property
    def cert(self) -> x509.Certificate:
        return x509.load_pem_x509_certificate(self.cert_pem)

    @property
    def ca_bundle_b64(self) -> str:
        """The value for ``clientConfig.caBundle`` (base64 of the CA PEM)."""
        return base64.b64encode(self.ca_cert_pem).decode("ascii")


def service_dns_names(service: str, namespace: str) -> list[str]:
    """The names the API server may use to reach ``service`` in ``namespace``."""
    return [
        service,
        f"{service}.{namespace}",
        f"{service}.{namespace}.svc",
        f"{service}.{namespace}.svc.cluster.local",
    ]


def _name(common_name: str) -> x509.Name:
    return x509.Name(
        [
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, CA_ORGANIZATION),
            x509.NameAttribute(NameOID.COMMON_NAME, common_name),
        ]
    )


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def _now(now: datetime | None) -> datetime:
    if now is None:
        return datetime.now(UTC)
    if now.tzinfo is None:
        raise CertError("now must be timezone-aware")
    return now


def _generate_ca(*, now: datetime, validity: timedelta) -> tuple[bytes, bytes]:
    key = ec.generate_private_key(ec.SECP256R1())
    usage = x509.KeyUsage(
        digital_signature=True,
        key_cert_sign=True,
        crl_sign=True,
        content_commitment=False,
        key_encipherment=False,
        data_encipherment=False,
        key_agreement=False,
        encipher_only=False,
        decipher_only=False,
    )
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name(CA_COMMON_NAME))
        .issuer_name(_name(CA_COMMON_NAME))
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - _BACKDATE)
        .not_valid_after(now + validity)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(usage, critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    return cert.public_bytes(serialization.Encoding.PEM), _key_pem(key)


def _issue_serving(
    *,
    ca_cert_pem: bytes,
    ca_key_pem: bytes,
    dns_names: Sequence[str],
    ip_addresses: Sequence[str],
    now: datetime,
    validity: timedelta,
) -> tuple[bytes, bytes]:
    ca_cert = x509.load_pem_x509_certificate(ca_cert_pem)
    ca_key = serialization.load_pem_private_key(ca_key_pem, password=None)
    if not isinstance(ca_key, ec.EllipticCurvePrivateKey):
        raise CertError("CA key must be an EC private key")
    if not dns_names:
        raise CertError("a serving certificate needs at least one DNS name")
    key = ec.generate_private_key(ec.SECP256R1())
    sans: list[x509.GeneralName] = [x509.DNSName(d) for d in dns_names]
    for ip in ip_addresses:
        try:
            sans.append(x509.IPAddress(ipaddress.ip_address(ip)))
        except ValueError as exc:
            raise CertError(f"ip_addresses: {ip!r} is not an IP address") from exc
    not_after = min(now + validity, ca_cert.not_valid_after_utc)
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name(dns_names[0]))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - _BACKDATE)
        .not_valid_after(not_after)
        .add_extension(x509.SubjectAlternativeName(sans), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()),
            critical=False,
        )
        .sign(ca_key, hashes.SHA256())
    )
    return cert.public_bytes(serialization.Encoding.PEM), _key_pem(key)


def generate_certificates(
    *,
    service: str = DEFAULT_SERVICE,
    namespace: str = DEFAULT_NAMESPACE,
    extra_dns_names: Iterable[str] = LOCAL_DNS_NAMES,
    ip_addresses: Iterable[str] = LOCAL_IP_ADDRESSES,
    now: datetime | None = None,
    ca_validity: timedelta = CA_VALIDITY,
    serving_validity: timedelta = SERVING_VALIDITY,
) -> CertBundle:
    """A fresh CA and a serving certificate for the Service's DNS names.

    The serving certificate also names ``extra_dns_names`` and ``ip_addresses``
    (``localhost`` and ``127.0.0.1`` by default) so a local run can be reached directly.
    """
    now = _now(now)
    ca_cert_pem, ca_key_pem = _generate_ca(now=now, validity=ca_validity)
    dns = service_dns_names(service, namespace) + [d for d in extra_dns_names]
    cert_pem, key_pem = _issue_serving(
        ca_cert_pem=ca_cert_pem,
        ca_key_pem=ca_key_pem,
        dns_names=dns,
        ip_addresses=list(ip_addresses),
        now=now,
        validity=serving_validity,
    )
    return CertBundle(ca_cert_pem, cert_pem, key_pem, ca_key_pem)


def needs_rotation(cert: x509.Certificate, now: datetime, threshold: timedelta) -> bool:
    """True when ``cert`` expires within ``threshold`` of ``now`` (or is not valid yet)."""
    now = _now(now)
    if now < cert.not_valid_before_utc:
        return True
    return now >= cert.not_valid_after_utc - threshold


def dns_names_of(cert: x509.Certificate) -> list[str]:
    """The DNS subject alternative names of ``cert``."""
    try:
        ext = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName)
    except x509.ExtensionNotFound:
        return []
    return list(ext.value.get_values_for_type(x509.DNSName))


def ip_addresses_of(cert: x509.Certificate) -> list[str]:
    """The IP subject alternative names of ``cert``, as strings."""
    try:
        ext = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName)
    except x509.ExtensionNotFound:
        return []
    return [str(ip) for ip in ext.value.get_values_for_type(x509.IPAddress)]


def rotate_if_needed(
    bundle: CertBundle,
    *,
    now: datetime | None = None,
    threshold: timedelta = ROTATION_THRESHOLD,
    ca_validity: timedelta = CA_VALIDITY,
    serving_validity: timedelta = SERVING_VALIDITY,
) -> CertBundle | None:
    """A re-issued bundle when the CA or the serving certificate is close to expiry.

    Returns ``None`` when nothing needs rotating. The serving certificate keeps its
    SANs. When the CA itself is due, a new CA is generated too (the caller must then
    patch the new ``caBundle`` into the webhook configurations). A bundle without the
    CA key (external CA) cannot be rotated here: :class:`CertError`.
    """
    now = _now(now)
    ca_due = needs_rotation(bundle.ca_cert, now, threshold)
    cert = bundle.cert
    if not ca_due and not needs_rotation(cert, now, threshold):
        return None
    if bundle.ca_key_pem is None:
        raise CertError("the serving certificate needs rotation but the CA key is not available")
    ca_cert_pem, ca_key_pem = bundle.ca_cert_pem, bundle.ca_key_pem
    if ca_due:
        ca_cert_pem, ca_key_pem = _generate_ca(now=now, validity=ca_validity)
    cert_pem, key_pem = _issue_serving(
        ca_cert_pem=ca_cert_pem,
        ca_key_pem=ca_key_pem,
        dns_names=dns_names_of(cert),
        ip_addresses=ip_addresses_of(cert),
        now=now,
        validity=serving_validity,
    )
    return CertBundle(ca_cert_pem, cert_pem, key_pem, ca_key_pem)


# ---------------------------------------------------------------- cert directory


def write_cert_dir(bundle: CertBundle, cert_dir: str | os.PathLike[str]) -> None:
    """Write ``ca.crt``, ``tls.crt`` and ``tls.key`` (mode 0600) into ``cert_dir``.

    Each file is written to a temporary name and renamed, so a reader never sees a
    half-written file; the key is renamed first so a new certificate never meets an old
    key for longer than one rename.
    """
    path = Path(cert_dir)
    path.mkdir(parents=True, exist_ok=True)
    for name, data in (
        (TLS_KEY_FILE, bundle.key_pem),
        (TLS_CERT_FILE, bundle.cert_pem),
        (CA_CERT_FILE, bundle.ca_cert_pem),
    ):
        tmp = path / f".{name}.tmp"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        os.replace(tmp, path / name)


def read_cert_dir(cert_dir: str | os.PathLike[str]) -> CertBundle:
    """Read the bundle from ``cert_dir`` (``ca.crt`` may be absent: then it is empty)."""
    path = Path(cert_dir)
    try:
        cert_pem = (path / TLS_CERT_FILE).read_bytes()
        key_pem = (path / TLS_KEY_FILE).read_bytes()
    except OSError as exc:
        raise CertError(f"cert dir {str(path)!r}: {exc.strerror}: {exc.filename}") from exc
    ca_path = path / CA_CERT_FILE
    ca_pem = ca_path.read_bytes() if ca_path.exists() else b""
    return CertBundle(ca_pem, cert_pem, key_pem)


def ensure_cert_dir(
    cert_dir: str | os.PathLike[str],
    *,
    service: str = DEFAULT_SERVICE,
    namespace: str = DEFAULT_NAMESPACE,
    now: datetime | None = None,
) -> bool:
    """Generate and write a self-signed bundle unless ``tls.crt`` and ``tls.key`` exist.

    Returns True when new files were written.
    """
    path = Path(cert_dir)
    if (path / TLS_CERT_FILE).exists() and (path / TLS_KEY_FILE).exists():
        return False
    write_cert_dir(generate_certificates(service=service, namespace=namespace, now=now), path)
    return True


def server_ssl_context(
    cert_file: str | os.PathLike[str], key_file: str | os.PathLike[str]
) -> ssl.SSLContext:
    """A server-side context serving ``cert_file``/``key_file``, TLS 1.2 or newer only."""
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        ctx.load_cert_chain(os.fspath(cert_file), os.fspath(key_file))
    except (OSError, ssl.SSLError) as exc:
        raise CertError(
            f"cannot load {os.fspath(cert_file)} / {os.fspath(key_file)}: {exc}"
        ) from exc
    return ctx


def client_ssl_context(ca_file: str | os.PathLike[str]) -> ssl.SSLContext:
    """A client context trusting only ``ca_file`` (what the API server does with caBundle)."""
    ctx = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=os.fspath(ca_file))
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    return ctx


class ReloadingSSLContext:
    """A server SSL context that follows ``tls.crt``/``tls.key`` when they change.

    :attr:`context` is handed to the server once. :meth:`check` (cheap: two
    ``stat`` calls) loads changed files into a fresh context and, through the SNI
    callback, every later handshake switches to it; a pair that does not load
    (e.g. caught between the two renames of a rotation) keeps the old one and is
    retried on the next check. Connections already open keep their certificate.
    """

    def __init__(self, cert_dir: str | os.PathLike[str]) -> None:
        self._dir = Path(cert_dir)
        self._cert = self._dir / TLS_CERT_FILE
        self._key = self._dir / TLS_KEY_FILE
        self._stamp = self._file_stamp()
        self.context = server_ssl_context(self._cert, self._key)
        self.context.sni_callback = self._select
        self._current = self.context
        self.reloads = 0
        self.last_error: str | None = None

    def _file_stamp(self) -> tuple[tuple[int, int, int], ...]:
        out = []
        for p in (self._cert, self._key):
            try:
                st = p.stat()
            except OSError:
                out.append((0, 0, 0))
            else:
                out.append((st.st_mtime_ns, st.st_size, st.st_ino))
        return tuple(out)

    def _select(
        self, sslobj: ssl.SSLObject | ssl.SSLSocket, _name: str | None, _ctx: ssl.SSLContext
    ) -> None:
        if self._current is not self.context:
            sslobj.context = self._current

    def check(self) -> bool:
        """Reload when the files changed; True when a new certificate is now served."""
        stamp = self._file_stamp()
        if stamp == self._stamp:
            return False
        try:
            fresh = server_ssl_context(self._cert, self._key)
        except CertError as exc:
            self.last_error = str(exc)
            return False
        self._stamp = stamp
        self._current = fresh
        self.reloads += 1
        self.last_error = None
        return True


# ---------------------------------------------------------------- Kubernetes bodies


def ca_bundle_patch(webhook_names: Iterable[str], ca_cert_pem: bytes) -> dict[str, object]:
    """Strategic-merge patch body setting ``caBundle`` on the named webhooks.

    ``webhooks`` is a list keyed by ``name`` (patch-merge-key), so this updates only the
    CA of each listed entry and leaves every other field alone. Send it with
    ``Content-Type: application/strategic-merge-patch+json`` to a
    Mutating/ValidatingWebhookConfiguration.
    """
    b64 = base64.b64encode(ca_cert_pem).decode("ascii")
    names = list(webhook_names)
    if not names:
        raise CertError("ca_bundle_patch needs at least one webhook name")
    return {"webhooks": [{"name": n, "clientConfig": {"caBundle": b64}} for n in names]}


def secret_from_bundle(
    bundle: CertBundle, *, name: str = DEFAULT_SECRET, namespace: str = DEFAULT_NAMESPACE
) -> dict[str, object]:
    """The ``kubernetes.io/tls`` Secret body that stores ``bundle`` (CA key included)."""

    def b64(data: bytes) -> str:
        return base64.b64encode(data).decode("ascii")

    data = {
        CA_CERT_FILE: b64(bundle.ca_cert_pem),
        TLS_CERT_FILE: b64(bundle.cert_pem),
        TLS_KEY_FILE: b64(bundle.key_pem),
    }
    if bundle.ca_key_pem is not None:
        data[CA_KEY_FILE] = b64(bundle.ca_key_pem)
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": name, "namespace": namespace},
        "type": "kubernetes.io/tls",
        "data": data,
    }


def bundle_from_secret(secret: Mapping[str, object]) -> CertBundle | None:
    """The bundle stored in a Secret body, or None when the Secret holds no certificate yet.

    A Secret with some but not all of the keys, or with undecodable data, raises
    :class:`CertError` naming the Secret and the key.
    """
    meta = secret.get("metadata")
    ident = "Secret"
    if isinstance(meta, Mapping):
        ident = f"Secret {meta.get('namespace', '')}/{meta.get('name', '')}"
    data = secret.get("data") or {}
    if not isinstance(data, Mapping):
        raise CertError(f"{ident}: data must be a map")
    if not data.get(TLS_CERT_FILE) and not data.get(TLS_KEY_FILE):
        return None
    decoded: dict[str, bytes] = {}
    for key in (CA_CERT_FILE, TLS_CERT_FILE, TLS_KEY_FILE, CA_KEY_FILE):
        raw = data.get(key)
        if raw is None or raw == "":
            if key == CA_KEY_FILE:
                continue
            raise CertError(f"{ident}: data[{key}] is missing")
        if not isinstance(raw, str):
            raise CertError(f"{ident}: data[{key}] must be a base64 string")
        try:
            decoded[key] = base64.b64decode(raw, validate=True)
        except ValueError as exc:
            raise CertError(f"{ident}: data[{key}] is not valid base64") from exc
    try:
        x509.load_pem_x509_certificate(decoded[TLS_CERT_FILE])
        x509.load_pem_x509_certificate(decoded[CA_CERT_FILE])
    except ValueError as exc:
        raise CertError(f"{ident}: data holds an unreadable certificate: {exc}") from exc
    return CertBundle(
        decoded[CA_CERT_FILE],
        decoded[TLS_CERT_FILE],
        decoded[TLS_KEY_FILE],
        decoded.get(CA_KEY_FILE),
    )
