"""What upload and stage share: container URLs and credentials, SAS redaction, retries, errors, progress.

Access is a SAS carried in the container URL, or Azure AD (DefaultAzureCredential) when the URL has none.
Account keys are refused. SAS values are secrets: everything this module prints goes through `redact`.
"""
from __future__ import annotations

import base64
import errno
import hashlib
import os
import random
import re
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterable
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import parse_qs, urlparse

from training.errors import AccessRefused, UsageError

BLOCK_SIZE = 4 * 1024 * 1024  # upload blocks: memory per upload worker stays near this
READ_SIZE = 1024 * 1024
MAX_ATTEMPTS = 6  # per file, for transient errors (connection lost, timeouts, 5xx, throttling)
_SAS = re.compile(r"([?&])(sig|se|sp|sv|sr|st|spr|skoid|sktid|skt|ske|sks|skv|srt|ss)=[^&\s'\"]*", re.I)
_KEYISH = re.compile(r"AccountKey=|SharedKey|SharedAccessKey", re.I)
T = TypeVar("T")


class PermanentError(Exception):
    """A failure retrying cannot fix (permissions, expiry, missing container): stops the whole transfer."""


class RefusedError(PermanentError):
    """A 403: retrying will not help now (the firewall or the role must change first)."""


# An account's firewall admits the addresses in the stack's allowedIpRanges, as they were at `pulumi up`: a team
# member cannot change them, the platform team (who run `pulumi up` for the stack) can.
FIREWALL_FIX = ("this machine's public address (`curl -s https://ifconfig.me` shows it) must be in allowedIpRanges "
                "in Pulumi.<stack>.yaml: ask the stack's platform team to add it (the bare address) and run "
                "`pulumi up`")
NOT_SIGNED_IN = ("not signed in to Azure: run `az login` (or set AZURE_CLIENT_ID, AZURE_TENANT_ID and "
                 "AZURE_CLIENT_SECRET for a service principal, or run where a managed identity is assigned), then "
                 "try again")


class NotSignedIn(UsageError):
    """No Azure AD credential could sign in. Deliberately not an azure.core AzureError: the SDKs' retry policies
    retry those (azure-storage-blob retries any AzureError, 15 s and more apart), a sign-in that failed once
    fails again."""


class AzureCredential:
    """DefaultAzureCredential as every command here uses it: quiet, failing once, in one line.

    Without a sign-in, DefaultAzureCredential logs a 15-line report of every credential it tried (at WARNING, on
    the `azure.identity` loggers) and raises; each SDK client then asks again, and storage retries. Here the
    report is not logged, the first failure raises NotSignedIn (NOT_SIGNED_IN) and later calls raise it at once.
    `probe_scope` asks for a token when the credential is made, so a command fails before it does anything (and
    before it imports a heavy SDK); tokens are cached per scope until 5 minutes before they expire, so the probe
    costs a signed-in user nothing (the SDK's first request reuses the token).

    Without a sign-in the slowest part is the managed identity probe: inside DefaultAzureCredential, the IMDS
    endpoint is probed once with a 1 s connection timeout and no retries (azure-identity's ImdsCredential).
    """

    def __init__(self, probe_scope: str | None = None):
        import logging

        from azure.identity import DefaultAzureCredential

        logging.getLogger("azure.identity").setLevel(logging.ERROR)
        self._credential = DefaultAzureCredential()
        self._tokens: dict[tuple, Any] = {}
        self._lock = threading.Lock()
        self._refused = False
        if probe_scope:
            self.get_token_info(probe_scope)

    def _cached(self, key: tuple | None, fetch: Callable[[], Any]) -> Any:
        """The token for `key` (None: never cached), fetched when missing or about to expire."""
        from azure.core.exceptions import ClientAuthenticationError
        from azure.identity import CredentialUnavailableError

        with self._lock:
            token = self._tokens.get(key) if key else None
            if token is not None and token.expires_on - 300 > time.time():
                return token
            if self._refused:
                raise NotSignedIn(NOT_SIGNED_IN)
            try:
                token = fetch()
            except (CredentialUnavailableError, ClientAuthenticationError):
                self._refused = True
                raise NotSignedIn(NOT_SIGNED_IN) from None
            if key:
                self._tokens[key] = token
            return token

    # Both protocols of azure-core (TokenCredential, SupportsTokenInfo) share one cache per scope. A token asked
    # for with options (claims, tenant_id...) answers one challenge, so it is never cached.
    def get_token(self, *scopes: str, **kwargs: Any):
        from azure.core.credentials import AccessToken

        if kwargs:
            return self._cached(None, lambda: self._credential.get_token(*scopes, **kwargs))
        info = self.get_token_info(*scopes)
        return AccessToken(info.token, info.expires_on)

    def get_token_info(self, *scopes: str, options: Any = None):
        return self._cached(None if options else scopes,
                            lambda: self._credential.get_token_info(*scopes, options=options))

    def close(self) -> None:
        self._credential.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()


@contextmanager
def stopping_cleanly(verb: str, target: "ContainerTarget | None" = None):
    """Turn whatever ends a transfer early into the one-line UsageError the CLI prints (SAS redacted). With the
    `target` the transfer used: a 403 after its SAS's expiry (`se`) says the SAS expired, whatever the service's
    code (Azurite answers AuthorizationFailure, Azure AuthenticationFailed), and a connection that was refused
    names the endpoint."""
    try:
        yield
    except PermanentError as err:
        expired = target.expired_line() if target is not None and getattr(err, "status", None) == 403 else None
        if expired:
            raise UsageError(f"{verb} stopped: {expired}") from None
        raise (AccessRefused if isinstance(err, RefusedError) else UsageError)(f"{verb} stopped: {err}") from None
    except Exception as err:  # noqa: BLE001 - transient errors that outlived every retry
        refused = connection_refused(err, target)
        if refused:
            raise UsageError(f"{verb} stopped after {MAX_ATTEMPTS} attempts: {refused}") from None
        detail = str(err).splitlines()[0] if str(err) else type(err).__name__
        raise UsageError(f"{verb} stopped after {MAX_ATTEMPTS} attempts: {redact(detail)}") from None


def connection_refused(err: BaseException, target: "ContainerTarget | None") -> str | None:
    """One line for a connection the endpoint refused (nothing listens there: a wrong URL, the emulator or proxy
    stopped, a firewall rejecting rather than dropping), naming the endpoint; None for other errors."""
    seen, chain = set(), err
    while chain is not None and id(chain) not in seen:
        seen.add(id(chain))
        if isinstance(chain, ConnectionRefusedError) or "connection refused" in str(chain).lower():
            break
        chain = chain.__cause__ or chain.__context__
    else:
        return None
    if target is not None:
        parsed = urlparse(target.account_url)
        endpoint = f"{parsed.hostname}:{parsed.port or (443 if parsed.scheme == 'https' else 80)}"
    else:
        found = re.search(r"host='([^']+)', port=(\d+)", str(err))
        endpoint = f"{found[1]}:{found[2]}" if found else "the storage endpoint"
    return (f"{endpoint} refused the connection: check the container URL, that the account (or emulator) is up, "
            "and your network")


def redact(text: str) -> str:
    """Remove SAS parameters from any URL in `text` (the signature shows as sig=REDACTED, after a `?` where
    the query began)."""
    def replace(m: re.Match) -> str:
        if m.group(2).lower() == "sig":
            return f"{m.group(1)}sig=REDACTED"
        return "?" if m.group(1) == "?" else ""  # keep the query's `?` when its first parameter goes

    return re.sub(r"\?(&|(?=[\s'\"]|$))", lambda m: "?" if m.group(1) == "&" else "", _SAS.sub(replace, text))


# What each verb needs of a SAS (https://learn.microsoft.com/rest/api/storageservices/create-service-sas#permissions-for-a-directory-container-or-blob).
SAS_NEEDS = {"upload": "cw", "stage": "rl", "download": "rl"}
REACH_TIMEOUT_S = 10.0


@dataclass(frozen=True)
class ContainerTarget:
    url: str  # as given, possibly with a SAS
    account_url: str
    container: str
    has_sas: bool

    @staticmethod
    def parse(url: str, name: str = "CONTAINER_URL", verb: str = "") -> "ContainerTarget":
        """`url`, or `env:VAR` to read it from the environment: arguments show in `ps`, a SAS must not. A SAS
        is checked before any request: its version and signature present, its permissions enough for `verb`."""
        if url.startswith("env:"):
            variable = url[len("env:"):]
            if not os.environ.get(variable):
                raise UsageError(f"{name}: {url} names the environment variable {variable}, which is not set")
            name, url = f"{name} (from ${variable})", os.environ[variable]
        if _KEYISH.search(url):
            raise UsageError(f"{name}: account keys are never accepted; pass a container URL with a SAS "
                             "(`pulumi stack output sas --show-secrets`) or none to use Azure AD")
        parsed = urlparse(url)
        if parsed.scheme not in ("https", "http") or not parsed.netloc:
            raise UsageError(f"{name}: {redact(url)!r} is not a container URL like "
                             "https://ACCOUNT.blob.core.windows.net/CONTAINER?SAS")
        parts = [p for p in parsed.path.split("/") if p]
        # Emulator/IP-style URLs carry the account in the path: http://127.0.0.1:10000/ACCOUNT/CONTAINER
        ip_style = parsed.hostname and (parsed.hostname[0].isdigit() or parsed.hostname == "localhost")
        need = 2 if ip_style else 1
        if len(parts) != need:
            raise UsageError(f"{name}: {redact(url)!r} must name exactly one container")
        if parsed.scheme == "http" and not ip_style:
            raise UsageError(f"{name}: use https (http is accepted only for a local emulator)")
        account_url = f"{parsed.scheme}://{parsed.netloc}" + (f"/{parts[0]}" if ip_style else "")
        query = parse_qs(parsed.query)
        if query and _SAS.search("?" + parsed.query):
            missing = [p for p in ("sv", "sig") if p not in query]
            if missing:
                raise UsageError(f"{name}: the SAS lacks {' and '.join(missing)}; copy the whole token "
                                 "(`pulumi stack output sas --show-secrets`)")
            needs = SAS_NEEDS.get(verb, "")
            granted = query.get("sp", [""])[0]
            lacking = [p for p in needs if p not in granted]
            if lacking:
                raise UsageError(f"{name}: the SAS grants sp={granted or '(none)'}, but {verb} needs {needs} "
                                 f"(lacks {''.join(lacking)}); use the container's {needs} SAS")
        expiry = query.get("se", [None])[0]
        if expiry:
            try:
                expires = datetime.fromisoformat(expiry.replace("Z", "+00:00"))
            except ValueError:
                raise UsageError(f"{name}: the SAS expiry se={expiry!r} is not a date") from None
            if expires.tzinfo is None:
                expires = expires.replace(tzinfo=timezone.utc)
            if expires <= datetime.now(timezone.utc):
                raise UsageError(f"{name}: the SAS expired at {expiry}; get a fresh one "
                                 "(`pulumi up` renews the stack's SAS)")
        return ContainerTarget(url, account_url, parts[-1], "sig=" in parsed.query)

    def client(self, workers: int):
        from azure.storage.blob import ContainerClient

        # Upload's client (stage reads through training/data/blob_reader.py).
        options = dict(max_block_size=BLOCK_SIZE, max_single_put_size=BLOCK_SIZE, connection_timeout=20, read_timeout=60,
                       retry_total=2,  # the SDK's own retries stay short; ours (per file, with backoff) do the rest
                       connection_pool_maxsize=max(10, workers * 2))
        if self.has_sas:
            return ContainerClient.from_container_url(self.url, **options)
        return ContainerClient(self.account_url, self.container, credential=AzureCredential(), **options)

    def check_reachable(self, timeout: float = REACH_TIMEOUT_S) -> None:
        """Fail in seconds, not minutes of retries, when the account cannot be reached at all."""
        parsed = urlparse(self.account_url)
        port = parsed.port or (443 if parsed.scheme == "https" else 80)
        try:
            socket.create_connection((parsed.hostname, port), timeout=timeout).close()
        except OSError as err:
            reason = err.strerror or type(err).__name__
            raise PermanentError(f"cannot reach {parsed.hostname}:{port} ({reason}): check the URL, your network, "
                                 "and that the storage firewall admits your IP (allowedIpRanges)") from None

    @property
    def sas_expiry(self) -> datetime | None:
        """The SAS's signed expiry (`se`), or None (no SAS, or none given)."""
        expiry = parse_qs(urlparse(self.url).query).get("se", [None])[0]
        try:
            expires = datetime.fromisoformat(expiry.replace("Z", "+00:00")) if expiry else None
        except ValueError:
            return None
        return expires.replace(tzinfo=timezone.utc) if expires and expires.tzinfo is None else expires

    def expired_line(self, now: datetime | None = None) -> str | None:
        """Why a request is refused once the SAS has expired mid-run (parse checks it only before the first)."""
        expires = self.sas_expiry
        if expires is None or expires > (now or datetime.now(timezone.utc)):
            return None
        return (f"the SAS expired at {expires:%Y-%m-%dT%H:%M:%SZ} during the run; get a fresh one (`pulumi up` "
                "renews the stack's SAS, sasExpiryHours sets how long it lives) and run again: files already "
                "copied are skipped")

    @property
    def display(self) -> str:
        return f"{self.account_url}/{self.container}" + (" (SAS)" if self.has_sas else " (Azure AD)")


def md5_file(path: Path) -> bytes:
    digest = hashlib.md5()
    with open(path, "rb") as f:
        while chunk := f.read(READ_SIZE):
            digest.update(chunk)
    return digest.digest()


def b64(digest: bytes | bytearray | None) -> str:
    return base64.b64encode(bytes(digest)).decode() if digest else "-"


def classify(err: BaseException, operation: str) -> BaseException:
    """Turn a storage error (the SDK's, or blob_reader's of the same shape) into PermanentError (with the fix)
    or leave it transient (returned as is): connection errors, timeouts, 408, 429 and 5xx. A full or read-only
    local disk is permanent too."""
    from azure.core.exceptions import ClientAuthenticationError

    if isinstance(err, PermanentError):
        return err
    if isinstance(err, NotSignedIn):
        return PermanentError(str(err))
    if isinstance(err, OSError) and err.errno in LOCAL_DISK_ERRNOS:
        # The local disk, not the network: a retry writes into the same full or read-only disk.
        where = f" ({err.filename})" if err.filename else ""
        return PermanentError(f"{operation}: {err.strerror or os.strerror(err.errno)}{where}: free space on that "
                              "disk (or pick another DEST) and run again; files already copied are skipped")
    status = getattr(err, "status_code", None)
    code = getattr(err, "error_code", None) or ""
    code = str(getattr(code, "value", code))  # the SDK gives a StorageErrorCode enum
    message = str(getattr(err, "message", "") or err)
    if isinstance(err, ClientAuthenticationError) or status == 403:
        forbidden = _forbidden(err, operation, code, status, message)
        forbidden.status = 403  # stopping_cleanly compares the SAS's expiry with the clock on any 403
        return forbidden
    return _not_forbidden(err, operation, code, status, message)


# Errors of the local disk (no space, quota, read-only) that no retry can mend.
LOCAL_DISK_ERRNOS = {errno.ENOSPC, errno.EDQUOT, errno.EROFS}


def _forbidden(err: BaseException, operation: str, code: str, status, message: str) -> PermanentError:
    """A 403's meaning. Azure's AuthenticationFailed carries AuthenticationErrorDetail (e.g. "Signed expiry time
    [...] must be after current time": https://learn.microsoft.com/rest/api/storageservices/common-rest-api-error-codes)."""
    detail = re.search(r"AuthenticationErrorDetail:?\s*(.+)", message)
    if "expir" in message.lower() or "Signed expiry time" in message:
        return PermanentError("the SAS has expired; get a fresh one (`pulumi up` renews the stack's SAS)")
    if code == "AuthorizationPermissionMismatch" or "permission" in message.lower():
        # The same 403 for a SAS without the permission and an Azure AD identity without the role.
        return RefusedError(f"not allowed: {operation}. With a SAS: upload needs create+write (cw) on the "
                            "container, stage and download need read+list (rl). With Azure AD: the identity "
                            "needs a blob role that writes (the stack's Blob Data Writer, which teamMembers "
                            "hold on `data`, or Storage Blob Data Contributor) for upload, or Storage Blob "
                            "Data Reader (stage, download) on it")
    if code == "AuthorizationFailure":
        # "This request is not authorized to perform this operation." (403): what the storage firewall
        # answers an address outside its IP rules, and a SAS for another resource
        # (https://learn.microsoft.com/rest/api/storageservices/common-rest-api-error-codes). A SAS we
        # checked before sending; an Azure AD identity without a role gets AuthorizationPermissionMismatch.
        return RefusedError(f"the storage account refused {operation} (403 AuthorizationFailure): this "
                            f"machine's address is not in the storage firewall; {FIREWALL_FIX}")
    if code.startswith("AuthorizationResourceType"):
        return PermanentError(f"access denied for {operation} ({code}): check the SAS scope")
    why = f": {redact(detail[1].strip())}" if detail else ""
    return PermanentError(f"authentication failed for {operation} ({code or status}){why}: the SAS or Azure "
                          "AD identity is not valid for this container")


def _not_forbidden(err: BaseException, operation: str, code: str, status, message: str) -> BaseException:
    from azure.core.exceptions import ResourceNotFoundError

    if isinstance(err, ResourceNotFoundError) or status == 404:
        if code == "ContainerNotFound":
            return PermanentError("the container does not exist (check the URL; `pulumi up` creates data, "
                                  "scripts and outputs)")
        return PermanentError(f"not found during {operation} ({code or status})")
    if status is not None and 400 <= status < 500 and status not in (408, 429):
        return PermanentError(f"{operation} refused with HTTP {status} ({code}): {redact(message.splitlines()[0])}")
    return err


@dataclass
class Stats:
    files: int = 0
    bytes: int = 0
    skipped: int = 0
    retried: int = 0
    failed: int = 0
    started: float = field(default_factory=time.monotonic)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, *, files=0, bytes=0, skipped=0, retried=0, failed=0) -> None:
        with self.lock:
            self.files += files
            self.bytes += bytes
            self.skipped += skipped
            self.retried += retried
            self.failed += failed

    def line(self, verb: str) -> str:
        elapsed = max(time.monotonic() - self.started, 1e-6)
        done = self.files + self.skipped
        return (f"{verb}: {done} files ({self.bytes / 1e6:.1f} MB moved) in {elapsed:.1f} s: {self.files} transferred, "
                f"{self.skipped} skipped, {self.retried} retried, {self.failed} failed; "
                f"{done / elapsed:.0f} files/s, {self.bytes / 1e6 / elapsed:.1f} MB/s")


class Progress:
    """A live line on a terminal; a plain line every `interval` seconds otherwise (logs, CI, Batch stdout)."""

    def __init__(self, verb: str, stats: Stats, interval: float = 5.0, stream=None):
        self.verb, self.stats, self.stream = verb, stats, stream or sys.stderr
        self.tty = self.stream.isatty()
        self.interval = 0.2 if self.tty else interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self):
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self._emit()

    def _emit(self) -> None:
        text = self.stats.line(self.verb)
        self.stream.write(f"\r{text}\033[K" if self.tty else text + "\n")
        self.stream.flush()

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()
        if self.tty:
            self.stream.write("\r\033[K")


def with_retries(operation: str, stats: Stats, attempt: Callable[[], T]) -> T:
    """Run `attempt`; on a transient error wait (exponential backoff with jitter) and try again."""
    for tries in range(1, MAX_ATTEMPTS + 1):
        try:
            return attempt()
        except Exception as err:  # noqa: BLE001 - sorted into permanent and transient below
            classified = classify(err, operation)
            if isinstance(classified, PermanentError) or tries == MAX_ATTEMPTS:
                raise classified from None
            stats.add(retried=1)
            time.sleep(min(30.0, 0.5 * 2 ** (tries - 1)) * (0.5 + random.random()))
    raise AssertionError("unreachable")


def run_bounded(items: Iterable[Any], work: Callable[[Any], None], workers: int) -> None:
    """Apply `work` to each item on `workers` threads, holding at most 2 x workers items in flight, so memory
    does not grow with the number of items; the first permanent error cancels the rest and is raised."""
    pending: set[Future] = set()
    with ThreadPoolExecutor(max_workers=workers) as pool:
        try:
            for item in items:
                pending.add(pool.submit(work, item))
                if len(pending) >= 2 * workers:
                    done, pending = wait(pending, return_when=FIRST_COMPLETED)
                    for future in done:
                        future.result()
            for future in pending:
                future.result()
        except BaseException:
            for future in pending:
                future.cancel()
            raise
