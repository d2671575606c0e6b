"""A local HTTPS service for the real Azure SDK clients: azure-core sends a bearer token over https only, so each
service the rehearsal and the tests speak at the wire (Batch's data plane, Cost Management's query API) listens on
127.0.0.1 with TLS. `LocalHttps` starts one around a request handler and stops it; a certificate it made itself
(a self-signed one for 127.0.0.1, in a temp folder of its own) is removed on close, so nothing is left in /tmp."""
from __future__ import annotations

import shutil
import ssl
import tempfile
import threading
from datetime import datetime, timedelta, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path


class QuietHandler(BaseHTTPRequestHandler):
    """HTTP/1.1 (the SDKs keep connections alive), no access log on stderr."""

    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass


def self_signed_certificate() -> tuple[str, str]:
    """A self-signed certificate for 127.0.0.1 in a temp folder: (cert.pem, key.pem)."""
    import ipaddress

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = datetime.now(timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now - timedelta(hours=1))
            .not_valid_after(now + timedelta(days=2))
            .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
                           critical=False)
            .sign(key, hashes.SHA256()))
    folder = Path(tempfile.mkdtemp(prefix="local-https-tls-"))
    (folder / "cert.pem").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    (folder / "key.pem").write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                                       serialization.NoEncryption()))
    (folder / "key.pem").chmod(0o600)
    return str(folder / "cert.pem"), str(folder / "key.pem")


class LocalHttps:
    """`handler` served on 127.0.0.1 over TLS at `url`; `ca_file` is the certificate a client trusts. `tls`:
    (certificate, key) files (default: a self-signed one, removed on close)."""

    def __init__(self, handler: type[BaseHTTPRequestHandler], tls: tuple[str, str] | None = None):
        cert, key = tls or self_signed_certificate()
        self._own_tls_folder = None if tls else Path(cert).parent
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.server.daemon_threads = True
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(cert, key)
        self.server.socket = context.wrap_socket(self.server.socket, server_side=True)
        self.url = f"https://127.0.0.1:{self.server.server_address[1]}"
        self.ca_file = cert
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self._thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        if self._own_tls_folder:
            shutil.rmtree(self._own_tls_folder, ignore_errors=True)
