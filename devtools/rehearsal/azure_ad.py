"""Azure AD's part, for code that signs in as a managed identity (DefaultAzureCredential) and reaches storage
with the token: the NFS server's staging unit runs unchanged, and storage honours each token by the program's
role assignments.

- Tokens: the App Service managed identity endpoint, which ManagedIdentityCredential (and so
  DefaultAzureCredential) uses when IDENTITY_ENDPOINT and IDENTITY_HEADER are set
  (https://learn.microsoft.com/azure/app-service/overview-managed-identity#rest-endpoint-reference: GET
  ?api-version=2019-08-01&resource=...&client_id=..., header X-IDENTITY-HEADER; the answer has access_token and
  expires_on). A VM asks IMDS instead (169.254.169.254), which a process here cannot be pointed at; the
  credential, the token cache and every storage call above it are the same code. A token here names the
  identity it was issued to; it is not a JWT.
- Storage: an HTTPS front (azure-core sends a bearer token only over TLS) with a certificate from a CA made for
  the rehearsal, which the clients trust through SSL_CERT_FILE and REQUESTS_CA_BUNDLE. It swaps each request's
  bearer token for the SAS that carries exactly what the identity's roles grant on that container
  (devtools/rehearsal/storage.py), and passes the request to Azurite: what the role refuses, Azurite refuses
  (403). A request without a token (a SAS of its own) passes unchanged.
"""
from __future__ import annotations

import datetime
import http.client
import http.server
import secrets
import ssl
import threading
import time
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

from devtools.rehearsal.storage import Account

TOKEN_LIFETIME_S = 3600
# Hop-by-hop and routing headers the front sets itself.
_NOT_FORWARDED = {"host", "authorization", "connection", "keep-alive", "transfer-encoding"}


def _make_certificates(folder: Path) -> tuple[Path, Path, Path]:
    """A CA and a server certificate for 127.0.0.1 signed by it: (ca.pem, server.pem, server.key)."""
    import ipaddress

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    now = datetime.datetime.now(datetime.timezone.utc)
    ca_key, key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "rehearsal storage CA")])
    ca = (x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name).public_key(ca_key.public_key())
          .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(minutes=5))
          .not_valid_after(now + datetime.timedelta(days=1))
          .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
          .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                       content_commitment=False, key_encipherment=False, data_encipherment=False,
                                       key_agreement=False, encipher_only=False, decipher_only=False), critical=True)
          .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False)
          .sign(ca_key, hashes.SHA256()))
    server = (x509.CertificateBuilder()
              .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")]))
              .issuer_name(ca_name).public_key(key.public_key()).serial_number(x509.random_serial_number())
              .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + datetime.timedelta(days=1))
              .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
                                                          x509.DNSName("localhost")]), critical=False)
              .add_extension(x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
              .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False)
              .sign(ca_key, hashes.SHA256()))
    folder.mkdir(parents=True, exist_ok=True)
    paths = folder / "ca.pem", folder / "server.pem", folder / "server.key"
    paths[0].write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    paths[1].write_bytes(server.public_bytes(serialization.Encoding.PEM))
    paths[2].write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    paths[2].chmod(0o600)
    return paths


class AzureAd:
    """`with AzureAd(account, identities, folder) as ad:` run code with `ad.env()` and `ad.container_url(...)`.
    `identities`: client ID -> principal ID of every managed identity the program declares."""

    def __init__(self, account: Account, identities: dict[str, str], folder: Path):
        self.account, self.identities = account, identities
        self.header_secret = secrets.token_hex(16)
        self.tokens: dict[str, str] = {}  # token -> principal ID
        self.ca, self.cert, self.key = _make_certificates(folder)
        self.refused: list[str] = []  # token requests for identities the program does not declare
        self._servers: list[http.server.ThreadingHTTPServer] = []

    # --- what callers use ----------------------------------------------------------------------------------
    def env(self) -> dict[str, str]:
        """The environment in which DefaultAzureCredential gets its tokens here and TLS trusts the front."""
        return {"IDENTITY_ENDPOINT": f"http://127.0.0.1:{self._servers[0].server_port}/msi/token",
                "IDENTITY_HEADER": self.header_secret, "SSL_CERT_FILE": str(self.ca),
                "REQUESTS_CA_BUNDLE": str(self.ca)}

    def container_url(self, declared_url: str) -> str:
        """The storage account's container URL (https://<account>.blob.core.windows.net/<name>), here."""
        container = self.account.container(declared_url)
        account = self.account.azurite.account_url.rsplit("/", 1)[-1]
        url = f"https://127.0.0.1:{self._servers[1].server_port}/{account}/{container}"
        self.account.aliases[url] = declared_url
        return url

    # --- the two servers -------------------------------------------------------------------------------------
    def __enter__(self) -> "AzureAd":
        ad = self

        class TokenEndpoint(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                query = parse_qs(urlsplit(self.path).query)
                client_id = (query.get("client_id") or [""])[0]
                if self.headers.get("X-IDENTITY-HEADER") != ad.header_secret:
                    return self._answer(401, b'{"error": "invalid_request"}')
                if client_id not in ad.identities:
                    ad.refused.append(client_id)
                    return self._answer(400, b'{"error": "invalid_request", "error_description": '
                                             b'"Identity not found"}')
                token = f"rehearsal-{secrets.token_hex(16)}"
                ad.tokens[token] = ad.identities[client_id]
                body = (f'{{"access_token": "{token}", "expires_on": "{int(time.time()) + TOKEN_LIFETIME_S}", '
                        f'"resource": "{(query.get("resource") or [""])[0]}", "token_type": "Bearer", '
                        f'"client_id": "{client_id}"}}')
                self._answer(200, body.encode())

            def _answer(self, status: int, body: bytes) -> None:
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args) -> None:
                pass

        class StorageFront(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def _forward(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                path, _, query = self.path.partition("?")
                authorization = self.headers.get("Authorization", "")
                if authorization.startswith("Bearer "):
                    principal = ad.tokens.get(authorization[len("Bearer "):])
                    if principal is None:
                        return self._refuse(401, "InvalidAuthenticationInfo", "the token is not one Azure AD issued")
                    container = path.split("/")[2] if path.count("/") >= 2 else ""
                    sas = ad.account.azurite.container_url(container, ad.account.permissions_of(principal, container))
                    query = "&".join(q for q in (query, urlsplit(sas).query) if q)
                headers = {k: v for k, v in self.headers.items() if k.lower() not in _NOT_FORWARDED}
                upstream = http.client.HTTPConnection("127.0.0.1", ad.account.azurite.port, timeout=120)
                try:
                    upstream.request(self.command, f"{path}?{query}" if query else path, body=body, headers=headers)
                    response = upstream.getresponse()
                    data = response.read()
                finally:
                    upstream.close()
                self.send_response(response.status, response.reason)
                for name, value in response.getheaders():
                    if name.lower() not in _NOT_FORWARDED | {"content-length"}:
                        self.send_header(name, value)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(data)

            def _refuse(self, status: int, code: str, message: str) -> None:
                body = f"<?xml version=\"1.0\"?><Error><Code>{code}</Code><Message>{message}</Message></Error>".encode()
                self.send_response(status)
                self.send_header("x-ms-error-code", code)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            do_GET = do_PUT = do_HEAD = do_DELETE = do_POST = _forward

            def log_message(self, *args) -> None:
                pass

        tokens = http.server.ThreadingHTTPServer(("127.0.0.1", 0), TokenEndpoint)
        front = http.server.ThreadingHTTPServer(("127.0.0.1", 0), StorageFront)
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(self.cert, self.key)
        front.socket = context.wrap_socket(front.socket, server_side=True)
        for server in (tokens, front):
            server.daemon_threads = True
            threading.Thread(target=server.serve_forever, daemon=True).start()
            self._servers.append(server)
        return self

    def __exit__(self, *exc) -> None:
        for server in self._servers:
            server.shutdown()
            server.server_close()
