"""Certificates: SANs, expiry and rotation, Secret round trip, file reload, trust."""

from __future__ import annotations

import base64
import socket
import ssl
import stat
import time
import warnings
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from cryptography import x509

from tests.support.webhook_server import WebhookServerThread, sample_view
from webhooks.server import certs

SERVICE_DNS = "quartermaster-webhook-service.quartermaster-system.svc"


def test_serving_certificate_names_the_service_and_localhost() -> None:
    bundle = certs.generate_certificates(service="wh", namespace="ns")
    cert = bundle.cert
    assert certs.dns_names_of(cert) == [
        "wh",
        "wh.ns",
        "wh.ns.svc",
        "wh.ns.svc.cluster.local",
        "localhost",
    ]
    assert certs.ip_addresses_of(cert) == ["127.0.0.1"]
    cert.verify_directly_issued_by(bundle.ca_cert)
    ca_constraints = bundle.ca_cert.extensions.get_extension_for_class(x509.BasicConstraints).value
    assert ca_constraints.ca is True
    leaf_constraints = cert.extensions.get_extension_for_class(x509.BasicConstraints).value
    assert leaf_constraints.ca is False
    usage = cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert list(usage) == [x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]


def test_needs_rotation_within_threshold_of_expiry() -> None:
    now = datetime(2026, 1, 1, tzinfo=UTC)
    cert = certs.generate_certificates(now=now, serving_validity=timedelta(days=90)).cert
    threshold = timedelta(days=30)
    assert not certs.needs_rotation(cert, now, threshold)
    assert not certs.needs_rotation(cert, now + timedelta(days=59), threshold)
    assert certs.needs_rotation(cert, now + timedelta(days=61), threshold)
    assert certs.needs_rotation(cert, now + timedelta(days=400), threshold)
    assert certs.needs_rotation(cert, now - timedelta(days=1), threshold)  # not valid yet


def test_rotation_reissues_the_serving_certificate_with_the_same_ca_and_names() -> None:
    now = datetime(2026, 1, 1, tzinfo=UTC)
    bundle = certs.generate_certificates(now=now, serving_validity=timedelta(days=90))
    assert certs.rotate_if_needed(bundle, now=now) is None
    later = now + timedelta(days=70)
    rotated = certs.rotate_if_needed(bundle, now=later)
    assert rotated is not None
    assert rotated.ca_cert_pem == bundle.ca_cert_pem
    assert rotated.cert.serial_number != bundle.cert.serial_number
    assert certs.dns_names_of(rotated.cert) == certs.dns_names_of(bundle.cert)
    assert rotated.cert.not_valid_after_utc > bundle.cert.not_valid_after_utc
    rotated.cert.verify_directly_issued_by(bundle.ca_cert)


def test_rotation_renews_an_expiring_ca() -> None:
    now = datetime(2026, 1, 1, tzinfo=UTC)
    bundle = certs.generate_certificates(now=now, ca_validity=timedelta(days=40))
    rotated = certs.rotate_if_needed(bundle, now=now + timedelta(days=20))
    assert rotated is not None and rotated.ca_cert_pem != bundle.ca_cert_pem
    rotated.cert.verify_directly_issued_by(rotated.ca_cert)


def test_rotation_without_the_ca_key_is_an_error() -> None:
    now = datetime(2026, 1, 1, tzinfo=UTC)
    b = certs.generate_certificates(now=now, serving_validity=timedelta(days=10))
    external = certs.CertBundle(b.ca_cert_pem, b.cert_pem, b.key_pem)
    with pytest.raises(certs.CertError, match="CA key is not available"):
        certs.rotate_if_needed(external, now=now)


def test_cert_dir_is_written_once_with_a_private_key(tmp_path: Path) -> None:
    assert certs.ensure_cert_dir(tmp_path) is True
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == ["ca.crt", "tls.crt", "tls.key"]
    assert stat.S_IMODE((tmp_path / "tls.key").stat().st_mode) == 0o600
    before = (tmp_path / "tls.crt").read_bytes()
    assert certs.ensure_cert_dir(tmp_path) is False
    assert (tmp_path / "tls.crt").read_bytes() == before


def test_missing_cert_dir_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(certs.CertError, match="tls.crt"):
        certs.read_cert_dir(tmp_path)
    with pytest.raises(certs.CertError, match="cannot load"):
        certs.ReloadingSSLContext(tmp_path)


def test_secret_round_trip_and_empty_secret() -> None:
    bundle = certs.generate_certificates()
    secret = certs.secret_from_bundle(bundle, name="s", namespace="ns")
    assert secret["type"] == "kubernetes.io/tls"
    assert secret["metadata"] == {"name": "s", "namespace": "ns"}
    assert sorted(secret["data"]) == ["ca.crt", "ca.key", "tls.crt", "tls.key"]
    assert certs.bundle_from_secret(secret) == bundle
    assert certs.bundle_from_secret({"metadata": {"name": "s"}, "data": {}}) is None
    assert certs.bundle_from_secret({"metadata": {"name": "s"}}) is None


def test_broken_secret_names_the_key() -> None:
    bundle = certs.generate_certificates()
    secret = certs.secret_from_bundle(bundle, name="s", namespace="ns")
    del secret["data"]["ca.crt"]
    with pytest.raises(certs.CertError, match=r"Secret ns/s: data\[ca.crt\] is missing"):
        certs.bundle_from_secret(secret)
    secret = certs.secret_from_bundle(bundle, name="s", namespace="ns")
    secret["data"]["tls.crt"] = "!!!"
    with pytest.raises(certs.CertError, match=r"data\[tls.crt\] is not valid base64"):
        certs.bundle_from_secret(secret)


def test_ca_bundle_patch_is_a_strategic_merge_keyed_by_webhook_name() -> None:
    pem = b"-----BEGIN CERTIFICATE-----\nabc\n-----END CERTIFICATE-----\n"
    b64 = base64.b64encode(pem).decode()
    assert certs.ca_bundle_patch(["mjob.kb.io", "mpod.kb.io"], pem) == {
        "webhooks": [
            {"name": "mjob.kb.io", "clientConfig": {"caBundle": b64}},
            {"name": "mpod.kb.io", "clientConfig": {"caBundle": b64}},
        ]
    }


def test_server_context_refuses_tls_below_1_2(tmp_path: Path) -> None:
    certs.ensure_cert_dir(tmp_path)
    ctx = certs.server_ssl_context(tmp_path / "tls.crt", tmp_path / "tls.key")
    assert ctx.minimum_version == ssl.TLSVersion.TLSv1_2


# ---------------------------------------------------------------- against the real server


def handshake(port: int, ctx: ssl.SSLContext, server_hostname: str) -> x509.Certificate:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        with ctx.wrap_socket(sock, server_hostname=server_hostname) as tls:
            der = tls.getpeercert(binary_form=True)
    assert der is not None
    return x509.load_der_x509_certificate(der)


@pytest.fixture()
def server(tmp_path: Path) -> Iterator[WebhookServerThread]:
    srv = WebhookServerThread(
        view=sample_view(), cert_dir=tmp_path / "certs", cert_check_interval=0.02
    )
    srv.start()
    yield srv
    srv.stop()


def test_client_trusting_only_the_ca_accepts_the_service_name_and_rejects_others(
    server: WebhookServerThread, tmp_path: Path
) -> None:
    ctx = certs.client_ssl_context(server.ca_file)
    served = handshake(server.port, ctx, SERVICE_DNS)
    assert SERVICE_DNS in certs.dns_names_of(served)
    handshake(server.port, ctx, "localhost")
    with pytest.raises(ssl.SSLCertVerificationError, match="Hostname mismatch"):
        handshake(server.port, ctx, "wrong.example")
    other_ca = tmp_path / "other"
    certs.ensure_cert_dir(other_ca)
    with pytest.raises(ssl.SSLCertVerificationError):
        handshake(server.port, certs.client_ssl_context(other_ca / "ca.crt"), SERVICE_DNS)


def test_tls_1_1_client_is_refused(server: WebhookServerThread) -> None:
    ctx = certs.client_ssl_context(server.ca_file)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        ctx.minimum_version = ssl.TLSVersion.MINIMUM_SUPPORTED
        ctx.maximum_version = ssl.TLSVersion.TLSv1_1
    with pytest.raises(ssl.SSLError):
        handshake(server.port, ctx, SERVICE_DNS)


def wait_for(predicate: Callable[[], bool], what: str) -> None:
    """Poll a condition (the server checks its files every 20 ms); no timing is asserted."""
    for _ in range(2000):
        if predicate():
            return
        time.sleep(0.01)
    raise AssertionError(f"never happened: {what}")


def test_rotated_files_are_served_to_new_connections(server: WebhookServerThread) -> None:
    old_serial = handshake(
        server.port, certs.client_ssl_context(server.ca_file), SERVICE_DNS
    ).serial_number
    fresh = certs.generate_certificates()
    certs.write_cert_dir(fresh, server.cert_dir)
    new_ctx = certs.client_ssl_context(server.ca_file)  # ca.crt now holds the new CA

    def serves_new() -> bool:
        try:
            return (
                handshake(server.port, new_ctx, SERVICE_DNS).serial_number
                == fresh.cert.serial_number
            )
        except ssl.SSLError:
            return False

    wait_for(serves_new, "the rotated certificate is served")
    assert fresh.cert.serial_number != old_serial
    status, _ = server.client().get("/healthz")
    assert status == 200


def test_half_written_rotation_keeps_the_old_certificate(tmp_path: Path) -> None:
    certs.ensure_cert_dir(tmp_path)
    reloading = certs.ReloadingSSLContext(tmp_path)
    assert reloading.check() is False
    other = certs.generate_certificates()
    (tmp_path / "tls.crt").write_bytes(other.cert_pem)  # key not yet replaced
    assert reloading.check() is False
    assert reloading.last_error is not None and "cannot load" in reloading.last_error
    (tmp_path / "tls.key").write_bytes(other.key_pem)
    assert reloading.check() is True
    assert reloading.reloads == 1 and reloading.last_error is None
