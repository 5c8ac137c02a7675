"""Throw-away certificates for loopback TLS: the double's own HTTPS and test webhooks.

kube-apiserver verifies webhooks against the configuration's ``caBundle`` and the
in-cluster DNS name ``<service>.<namespace>.svc``; tests need a CA and a serving cert
with those SANs (and 127.0.0.1) to exercise that path for real.  EC P-256 keys and SHA-256
signatures, which kube-apiserver and the stdlib ``ssl`` module both accept.
"""

from __future__ import annotations

import base64
import ipaddress
import ssl
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID


@dataclass(frozen=True, slots=True)
class ServingCert:
    """PEM-encoded CA certificate, serving certificate and its private key."""

    ca_pem: bytes
    cert_pem: bytes
    key_pem: bytes

    @property
    def ca_bundle(self) -> str:
        """The CA as a webhook configuration's ``caBundle`` (base64 of the PEM)."""
        return base64.b64encode(self.ca_pem).decode()

    def write(self, directory: Path) -> tuple[Path, Path, Path]:
        """Write ``tls.crt``, ``tls.key`` and ``ca.crt`` into ``directory``."""
        directory.mkdir(parents=True, exist_ok=True)
        paths = (directory / "tls.crt", directory / "tls.key", directory / "ca.crt")
        for path, data in zip(paths, (self.cert_pem, self.key_pem, self.ca_pem), strict=True):
            path.write_bytes(data)
        return paths

    def server_ssl_context(self) -> ssl.SSLContext:
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        with tempfile.TemporaryDirectory() as tmp:
            cert, key, _ = self.write(Path(tmp))
            context.load_cert_chain(cert, key)
        return context

    def client_ssl_context(self) -> ssl.SSLContext:
        return ssl.create_default_context(cadata=self.ca_pem.decode())


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _self_signed_ca(
    ca_name: str, now: datetime
) -> tuple[ec.EllipticCurvePrivateKey, x509.Certificate]:
    """A fresh CA key and its self-signed certificate, valid for 30 days."""
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca = (
        x509.CertificateBuilder()
        .subject_name(_name(ca_name))
        .issuer_name(_name(ca_name))
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - timedelta(minutes=5))
        .not_valid_after(now + timedelta(days=30))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                key_cert_sign=True,
                crl_sign=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(
            x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False
        )
        .sign(ca_key, hashes.SHA256())
    )
    return ca_key, ca


def make_serving_cert(
    dns_names: Sequence[str],
    *,
    ip_addresses: Sequence[str] = ("127.0.0.1",),
    ca_name: str = "apiserver-double-ca",
) -> ServingCert:
    """A fresh CA and a serving certificate for ``dns_names`` and ``ip_addresses``."""
    if not dns_names and not ip_addresses:
        raise ValueError("a serving certificate needs at least one DNS name or IP address")
    now = datetime.now(UTC)
    ca_key, ca = _self_signed_ca(ca_name, now)
    key = ec.generate_private_key(ec.SECP256R1())
    sans: list[x509.GeneralName] = [x509.DNSName(d) for d in dns_names]
    sans += [x509.IPAddress(ipaddress.ip_address(ip)) for ip in ip_addresses]
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name(dns_names[0] if dns_names else ip_addresses[0]))
        .issuer_name(ca.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - timedelta(minutes=5))
        .not_valid_after(now + timedelta(days=30))
        .add_extension(x509.SubjectAlternativeName(sans), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False
        )
        .sign(ca_key, hashes.SHA256())
    )
    return ServingCert(
        ca_pem=ca.public_bytes(serialization.Encoding.PEM),
        cert_pem=cert.public_bytes(serialization.Encoding.PEM),
        key_pem=key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        ),
    )


def make_client_cert(
    common_name: str, *, organizations: Sequence[str] = (), ca_name: str = "front-proxy-ca"
) -> ServingCert:
    """A fresh CA and a *client* certificate (CN ``common_name``, O ``organizations``):
    the front-proxy PKI of the aggregation layer, or a user's x509 identity."""
    now = datetime.now(UTC)
    ca_key, ca = _self_signed_ca(ca_name, now)
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name(
        [x509.NameAttribute(NameOID.COMMON_NAME, common_name)]
        + [x509.NameAttribute(NameOID.ORGANIZATION_NAME, o) for o in organizations]
    )
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(ca.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - timedelta(minutes=5))
        .not_valid_after(now + timedelta(days=30))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    return ServingCert(
        ca_pem=ca.public_bytes(serialization.Encoding.PEM),
        cert_pem=cert.public_bytes(serialization.Encoding.PEM),
        key_pem=key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        ),
    )
