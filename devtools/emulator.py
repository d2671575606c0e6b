"""Azurite, the Azure Storage emulator, as the local stand-in for blob storage (demo and tests).

`make setup` installs the pinned npm package into .cache/azurite. `Azurite()` starts its blob service on
127.0.0.1 on a free port with its data in a temporary folder (or in `location`, kept for a later start), and always
stops it on exit. It enforces SAS
permissions and expiry like Azure. The emulator's account key is the well-known public development key: it
signs SAS here the way Azure's listServiceSas does in the real stack, and never leaves this module.
"""
from __future__ import annotations

import os
import select
import shutil
import socket
import subprocess
import tempfile
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

from infra import REPO_ROOT

AZURITE = REPO_ROOT / ".cache" / "azurite" / "node_modules" / ".bin" / "azurite-blob"
ACCOUNT = "devstoreaccount1"
# What azurite-blob prints once SIGTERM has closed its service and its databases (dist/src/blob/main.js).
CLOSED = b"Azurite Blob service successfully closed"
_DEV_KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Azurite:
    def __init__(self, port: int | None = None, location: Path | None = None):
        """`location`: where its data lives and stays (another Azurite started there later sees the same blobs);
        default: a temporary folder removed on exit."""
        if not AZURITE.exists():
            raise RuntimeError(f"Azurite is not installed at {AZURITE}; run `make setup`")
        self.port = port or _free_port()
        self.keep = location is not None
        if location is not None:
            location.mkdir(parents=True, exist_ok=True)
        self.data_dir = location if location is not None else Path(tempfile.mkdtemp(prefix="azurite-"))
        self.process: subprocess.Popen | None = None

    @property
    def account_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/{ACCOUNT}"

    def start(self) -> "Azurite":
        # --disableTelemetry (Azurite's README, "Telemetry"): else Azurite sends usage data to Application Insights
        # and spools what it cannot send in $TMPDIR/Microsoft-AzureMonitor-*, left behind on the host.
        self.process = subprocess.Popen(
            [str(AZURITE), "--blobHost", "127.0.0.1", "--blobPort", str(self.port), "--location", str(self.data_dir),
             "--skipApiVersionCheck", "--silent", "--disableTelemetry"],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)  # a few lines: start, closing, closed
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"Azurite exited with status {self.process.returncode}")
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.5).close()
                return self
            except OSError:
                time.sleep(0.1)
        raise RuntimeError(f"Azurite did not listen on 127.0.0.1:{self.port} within 30 s")

    def stop(self) -> None:
        if self.process and self.process.poll() is None:
            self.process.terminate()
            # Once closed, Azurite still waits for every client's keep-alive socket to close, which an SDK client
            # left open in this process never does: after it says its data is saved, the rest is a wait (10 s a
            # stop, until this). It gets 10 s to say so, as it had to exit before.
            self._wait_until_closed(within=10)
            if self.process.poll() is None:
                self.process.kill()
            self.process.wait()
        if self.process:
            self.process.stdout.close()
        self.process = None

    def _wait_until_closed(self, within: float) -> None:
        """Until Azurite says it has closed, or has exited, or `within` s have passed."""
        fd, said, deadline = self.process.stdout.fileno(), b"", time.monotonic() + within
        while (left := deadline - time.monotonic()) > 0 and select.select([fd], [], [], left)[0]:
            chunk = os.read(fd, 4096)
            said += chunk
            if not chunk or CLOSED in said:
                return

    def __enter__(self) -> "Azurite":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
        if not self.keep:
            shutil.rmtree(self.data_dir, ignore_errors=True)

    def create_container(self, name: str) -> None:
        from azure.storage.blob import BlobServiceClient

        service = BlobServiceClient(self.account_url, credential={"account_name": ACCOUNT, "account_key": _DEV_KEY})
        service.create_container(name)

    def container_url(self, container: str, permission: str, hours: float = 1.0, expiry: datetime | None = None) -> str:
        """A container URL with a SAS: permission like 'rl' (read+list) or 'racwl'; valid for `hours` (< 0 gives
        an expired one) or until `expiry`. Protocol https,http: Azurite here serves http only."""
        from azure.storage.blob import generate_container_sas

        now = datetime.now(timezone.utc)
        expiry = expiry or now + timedelta(hours=hours)
        sas = generate_container_sas(ACCOUNT, container, account_key=_DEV_KEY, permission=permission,
                                     start=now - timedelta(minutes=5) if expiry > now else now - timedelta(hours=2),
                                     expiry=expiry, protocol="https,http")
        return f"{self.account_url}/{container}?{sas}"
