"""A node's GPU memory, GPU errors and InfiniBand ports, read before an attempt's ranks start (parsers pure; the
runner through the job's SSH as gpu_check's).

A hang that names no rank ("all ranks alive, a collective hung") is most often a GPU or a link that went bad while
its process lived: an uncorrectable ECC error (Xid 48, 94, 95), a GPU fallen off the bus (Xid 79), an NVLink error
(Xid 74), a flapping InfiniBand port. gpu_check.py sees only whether the driver still lists the GPUs; these checks
read what the driver and the HCA say of them, so a retry does not land on the same node:

- `nvidia-smi -q`: per GPU, "ECC Errors" (Volatile: uncorrectable counts since the driver loaded), "Retired Pages"
  (a page retirement pending: the GPU needs a reset) and "Remapped Rows" (a remap pending, or a remapping failure:
  the GPU needs a reset or a replacement). Field names as the nvidia-smi man page lists them under GPU ATTRIBUTES
  (nvidia-smi.1, driver 550: https://manpages.ubuntu.com/manpages/plucky/man1/nvidia-smi.1.html) and as NVIDIA's
  "A100 GPU memory error management" describes the remapping statistics
  (https://docs.nvidia.com/deploy/a100-gpu-mem-error-mgmt/user-visible-statistics.html). Its output is "not
  guaranteed to be backwards compatible" (the man page): fields not found are not faults.
- The kernel log's Xid lines (`NVRM: Xid (PCI:0000:01:00): 94, pid=7194, Contained: ...`, the format of the page
  above), for the Xids that mean the GPU or its links cannot be trusted (FATAL_XIDS). `dmesg` may be refused inside
  a container (kernel.dmesg_restrict): then not checked.
- `ibstat`: per port of each HCA, "State" (Active), "Physical state" (LinkUp) and "Rate" (Gb/s), printed as
  rdma-core's infiniband-diags/ibstat.c `port_dump` does; an InfiniBand port that is not Active/LinkUp, or slower
  than the size's rate, fails the node. Ethernet ports (the VM's accelerated networking) are left out.
"""
from __future__ import annotations

import re
import shlex
import subprocess
from collections.abc import Callable

# Xids (NVIDIA's Xid catalog, https://docs.nvidia.com/deploy/xid-errors/) after which a node must not train again
# until it is looked at: 48 double-bit ECC, 63/64 a row remapping recorded/failed (a reset is due), 74 NVLink error,
# 79 fallen off the bus, 92 high single-bit ECC rate, 94/95 contained/uncontained ECC error, 119/120 GSP errors.
FATAL_XIDS = {48: "double-bit ECC error", 63: "row remapping pending (reset due)", 64: "row remapping failed",
              74: "NVLink error", 79: "GPU fallen off the bus", 92: "high single-bit ECC error rate",
              94: "contained ECC error", 95: "uncontained ECC error", 119: "GSP RPC timeout", 120: "GSP error"}
XID_LINE = re.compile(r"NVRM: Xid \(PCI:([0-9A-Fa-f:.]+)[^)]*\): (\d+),")
GPU_HEADER = re.compile(r"GPU [0-9A-Fa-f]+:[0-9A-Fa-f]+:[0-9A-Fa-f]+\.[0-9A-Fa-f]+$")
TIMEOUT_S = 60


def _tree(text: str) -> list[tuple[int, str, str]]:
    """nvidia-smi -q's lines as (indent, key, value); a section header has an empty value."""
    rows = []
    for line in text.splitlines():
        if not line.strip() or line.lstrip().startswith("="):
            continue
        indent = len(line) - len(line.lstrip(" "))
        if indent == 0 and GPU_HEADER.match(line.strip()):  # "GPU 00000001:00:00.0": the bus ID has colons
            rows.append((0, line.strip(), ""))
            continue
        key, _, value = line.strip().partition(" : ") if " : " in line else line.strip().partition(":")
        rows.append((indent, key.strip(), value.strip()))
    return rows


def smi_problems(text: str) -> list[str]:
    """What `nvidia-smi -q` says is wrong with a node's GPUs, one item per finding (pure)."""
    found = []
    gpu, path = "?", []  # the GPU's bus ID, the section headers above the current line
    for indent, key, value in _tree(text):
        if key.startswith("GPU ") and not value and indent == 0:
            gpu, path = key.removeprefix("GPU ").strip(), []
            continue
        while path and path[-1][0] >= indent:
            path.pop()
        if not value:
            path.append((indent, key))
            continue
        sections = [name for _, name in path]
        where = " / ".join(sections[-2:] + [key])
        number = int(value) if value.isdigit() else None
        if "ECC Errors" in sections and "Volatile" in sections and number and (
                "Uncorrectable" in key or "Double Bit" in key):
            found.append(f"GPU {gpu}: {where} = {number}")
        elif "Retired Pages" in sections and key.startswith("Pending") and value.lower() == "yes":
            found.append(f"GPU {gpu}: {where} (a page retirement waits for a reset)")
        elif "Remapped Rows" in sections and key in ("Pending", "Remapping Failure Occurred") \
                and value.lower() == "yes":
            found.append(f"GPU {gpu}: {where}")
    return found


def xid_problems(kernel_log: str) -> list[str]:
    """The fatal Xids in a kernel log, once per (GPU, Xid), in order (pure)."""
    seen, found = set(), []
    for match in XID_LINE.finditer(kernel_log):
        pci, xid = match.group(1), int(match.group(2))
        if xid in FATAL_XIDS and (pci, xid) not in seen:
            seen.add((pci, xid))
            found.append(f"GPU {pci}: Xid {xid} ({FATAL_XIDS[xid]})")
    return found


def ib_ports(text: str) -> list[dict]:
    """ibstat's ports: {ca, port, state, physical, rate (Gb/s), link_layer} each (pure)."""
    ports, ca, port = [], "?", None
    for line in text.splitlines():
        stripped = line.strip()
        head = re.match(r"CA '([^']+)'", stripped)
        if head:
            ca, port = head.group(1), None
            continue
        number = re.match(r"Port (\d+):$", stripped)
        if number:
            port = {"ca": ca, "port": int(number.group(1)), "state": "", "physical": "", "rate": None,
                    "link_layer": ""}
            ports.append(port)
            continue
        if port is None:
            continue
        key, _, value = stripped.partition(":")
        value = value.strip()
        if key == "State":
            port["state"] = value
        elif key == "Physical state":
            port["physical"] = value
        elif key == "Rate":
            try:
                port["rate"] = float(value.split()[0])
            except (IndexError, ValueError):
                port["rate"] = None
        elif key == "Link layer":
            port["link_layer"] = value
    return ports


def ib_problems(text: str, min_rate: float = 0.0) -> list[str]:
    """InfiniBand ports that are not Active and LinkUp, or run below `min_rate` Gb/s (pure)."""
    found = []
    for p in ib_ports(text):
        if p["link_layer"] and p["link_layer"] != "InfiniBand":
            continue
        name = f"{p['ca']} port {p['port']}"
        if p["state"] != "Active" or p["physical"] != "LinkUp":
            found.append(f"{name}: {p['state'] or '?'} / {p['physical'] or '?'} (not Active / LinkUp)")
        elif min_rate and p["rate"] is not None and p["rate"] < min_rate:
            found.append(f"{name}: rate {p['rate']:g} Gb/s, below {min_rate:g}")
    return found


CHECKS = (("nvidia-smi", ["nvidia-smi", "-q"]), ("dmesg", ["dmesg"]), ("ibstat", ["ibstat"]))


def problems(outputs: dict[str, tuple[int, str]], min_ib_rate: float = 0.0) -> list[str]:
    """A node's findings from its commands' (exit code, output) by name (CHECKS); a command that failed or is
    missing is not a finding (gpu_check names a failing nvidia-smi). Pure."""
    found = []
    for name, parse in (("nvidia-smi", smi_problems), ("dmesg", xid_problems),
                        ("ibstat", lambda text: ib_problems(text, min_ib_rate))):
        rc, text = outputs.get(name, (127, ""))
        if rc == 0:
            found.extend(parse(text))
    return found


def run_on(host: str, local: bool) -> dict[str, tuple[int, str]]:
    """Each of CHECKS on `host`: here, or through the job's SSH (node-ssh's client config: its port and key)."""
    outputs = {}
    for name, command in CHECKS:
        argv = command if local else ["ssh", "-o", "ConnectTimeout=20", host, shlex.join(command)]
        try:
            done = subprocess.run(argv, capture_output=True, text=True, timeout=TIMEOUT_S)
            outputs[name] = (done.returncode, done.stdout)
        except subprocess.TimeoutExpired:
            outputs[name] = (124, "")
        except OSError:
            outputs[name] = (127, "")
    return outputs


def check(host: str, local: bool, run: Callable[[str, bool], dict[str, tuple[int, str]]] = run_on,
          min_ib_rate: float = 0.0) -> str | None:
    """What is wrong with `host`'s GPUs and links, in one line, or None."""
    found = problems(run(host, local), min_ib_rate)
    return "; ".join(found) if found else None
