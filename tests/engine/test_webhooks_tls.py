"""Each webhook host's certificate is checked on its own connection (issue 33).

An HTTPS receiver on loopback holds a certificate for `good.test` only, signed by a
CA made in the test (trusted through SSL_CERT_FILE, as an operator with a private
CA would); `good.test` and `bad.test` both resolve to 127.0.0.1 (the resolver is
injected; WEBHOOK_ALLOW_PRIVATE allows loopback). One real `Deliverer` over the
SQLite outbox delivers to `good.test`, then to `bad.test` on the same address: the
second must fail its TLS check on a connection of its own, not ride the first one's,
and the receiver must see each request's own host as its TLS server name (SNI).
"""

from __future__ import annotations

import asyncio
import datetime
import ipaddress
import ssl
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from core import outbound
from engine.records import WebhookQueued
from engine.sqlite import SqliteRunStorage
from engine.webhooks import Deliverer, DeliveryStore, WebhookConfig

GOOD, BAD = "good.test", "bad.test"


@dataclass
class Pki:
    """A test CA's certificate file, and a server certificate and key for `GOOD` only."""

    ca_file: Path
    cert_file: Path
    key_file: Path


def name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def make_pki(directory: Path) -> Pki:
    """Make a CA and a certificate it signs for `GOOD` (and no other name)."""
    now = datetime.datetime.now(datetime.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca = (
        x509.CertificateBuilder()
        .subject_name(name("Atelier test CA"))
        .issuer_name(name("Atelier test CA"))
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(hours=1))
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
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), False)
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (
        x509.CertificateBuilder()
        .subject_name(name(GOOD))
        .issuer_name(ca.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(hours=1))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName(GOOD)]), critical=False)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), False
        )
        .sign(ca_key, hashes.SHA256())
    )
    pki = Pki(directory / "ca.pem", directory / "server.pem", directory / "server.key")
    pki.ca_file.write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    pki.cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    pki.key_file.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return pki


class TlsReceiver:
    """An HTTPS receiver on 127.0.0.1 that keeps connections open (HTTP/1.1 keep-alive).

    `handshakes` lists the server name (SNI) of every TLS handshake; `received` the
    SNI of each request's connection with the request's `Host`.
    """

    def __init__(self, pki: Pki) -> None:
        self.handshakes: list[str | None] = []
        self.received: list[tuple[str | None, str]] = []
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(pki.cert_file, pki.key_file)
        names: dict[int, str | None] = {}

        def sni(sock: Any, server_name: str | None, _context: ssl.SSLContext) -> None:
            self.handshakes.append(server_name)
            names[id(sock)] = server_name

        context.sni_callback = sni
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:
                self.rfile.read(int(self.headers["Content-Length"]))
                receiver.received.append((names.get(id(self.connection)), self.headers["Host"]))
                self.send_response(200)
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"ok")

            def log_message(self, *_args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.socket = context.wrap_socket(self.server.socket, server_side=True)
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def url(self, host: str) -> str:
        return f"https://{host}:{self.port}/hook"

    def __enter__(self) -> TlsReceiver:
        self.thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def receiver(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[TlsReceiver]:
    """The receiver, its CA trusted by the deliverer, every name resolving to loopback."""
    pki = make_pki(tmp_path)
    monkeypatch.setenv("SSL_CERT_FILE", str(pki.ca_file))
    monkeypatch.delenv("SSL_CERT_DIR", raising=False)

    async def resolve(host: str, port: int) -> list[Any]:
        return [ipaddress.ip_address("127.0.0.1")]

    monkeypatch.setattr(outbound, "resolve", resolve)
    with TlsReceiver(pki) as running:
        yield running


async def settled(store: DeliveryStore, run_id: str) -> dict[str, Any]:
    """Wait until the run's one delivery is no longer pending; return it."""
    async with asyncio.timeout(20):
        while True:
            shown = await store.for_run(run_id)
            if shown and shown[0]["status"] != "pending":
                return shown[0]
            await asyncio.sleep(0.05)


async def test_each_host_is_verified_on_its_own_connection_with_its_own_sni(
    tmp_path: Path, receiver: TlsReceiver
) -> None:
    config = WebhookConfig(allow_private=True, max_attempts=2, backoff=0.05, poll_interval=0.05)
    async with SqliteRunStorage(str(tmp_path / "atelier.db")) as storage:
        deliverer = Deliverer(storage.deliveries, config)
        await deliverer.start()
        try:
            deliveries = {}
            for run_id, host in (("r-good", GOOD), ("r-bad", BAD), ("r-again", GOOD)):
                url = receiver.url(host)
                storage.events.record(WebhookQueued(f"d-{run_id}", run_id, "t1", "o", url, "{}"))
                await storage.events.flush()
                deliverer.wake()
                deliveries[run_id] = await settled(storage.deliveries, run_id)
        finally:
            await deliverer.stop()
    assert deliveries["r-good"]["status"] == "success"
    assert deliveries["r-again"]["status"] == "success"
    bad = deliveries["r-bad"]
    assert bad["status"] == "failed" and bad["attempts"] == 2  # retried, then given up
    for attempt in bad["history"]:
        assert attempt["outcome"] == "network_error" and attempt["status_code"] is None
        assert "CERTIFICATE_VERIFY_FAILED" in attempt["error"] and BAD in attempt["error"]
        assert "127.0.0.1" not in attempt["error"]
    # Every request the receiver got came on a connection whose TLS named its own host.
    assert [(sni, host.split(":")[0]) for sni, host in receiver.received] == [
        (GOOD, GOOD),
        (GOOD, GOOD),
    ]
    assert receiver.handshakes.count(BAD) == 2  # one refused handshake per attempt
