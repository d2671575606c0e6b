"""A real Docker engine for the tests and the image builds, started per run and gone after it.

Debian bookworm's own `docker.io` (20.10), `containerd`, `runc` and `tini`, unpacked by `make setup` into
.cache/debs (apt-get download + dpkg -x; nothing is installed on the host). `running()` starts `dockerd` with its
own data root, exec root, pidfile and socket in a temporary folder, without touching the host's network
(`--iptables=false --bridge=none`: containers use `--network host` or none), and always stops it and removes its
folders: at the end of the `with` block, on an exception, and on SIGTERM (turned into SystemExit while it runs).
The data root may instead be a kept folder (`data_root=`), so that images and build layers survive between runs.

`base_image()` makes the local stand-in for the images' CUDA bases, which cannot be fetched here (only Debian's
archive is reachable): Debian bookworm `minbase` made by Debian's debootstrap (unpacked too), cached as a tar in
.cache/docker, imported into the engine. Its one addition: this machine's CA bundle and pip's `cert` setting, so
pip reaches PyPI through this machine's TLS interception; the real bases get nothing of the kind.

Needs root (dockerd) and the kernel's overlay file system and cgroups; `unavailable()` names what is missing in one
line, which the tests print as their skip reason.
"""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
DEBS = REPO_ROOT / ".cache" / "debs" / "root"
CACHE = REPO_ROOT / ".cache" / "docker"
SUITE = "bookworm"
STAND_IN = f"{SUITE}-minbase-2"  # bumped when the stand-in's making changes, so no cache keeps an older one
BASE_IMAGE = f"dltrain-standin-base:{STAND_IN}"
CA_BUNDLE = Path("/etc/ssl/certs/ca-certificates.crt")
# Where the stand-in keeps this machine's CA bundle: not under /etc/ssl/certs, whose ca-certificates.crt the
# images' apt step regenerates (update-ca-certificates) when a package pulls in ca-certificates.
IMAGE_CA_BUNDLE = "/etc/pip/host-ca-bundle.crt"
READY_TIMEOUT_S = 60
STOP_TIMEOUT_S = 30


def unavailable() -> str:
    """Why this machine cannot run the engine ('' when it can), as the one line a skipped test prints."""
    if os.geteuid() != 0:
        return "not played: a real Docker engine (dockerd needs root; run as root, e.g. in CI)"
    try:
        filesystems = Path("/proc/filesystems").read_text()
    except OSError:
        filesystems = ""
    if "overlay" not in filesystems.split():
        return "not played: a real Docker engine (the kernel has no overlay file system for dockerd's overlay2)"
    if not Path("/sys/fs/cgroup").is_dir() or not any(Path("/sys/fs/cgroup").iterdir()):
        return "not played: a real Docker engine (no cgroups mounted at /sys/fs/cgroup)"
    return ""


def engine_env() -> dict[str, str]:
    """PATH with Debian's unpacked engine first (dockerd finds containerd, runc and docker-init on it)."""
    if not (DEBS / "usr" / "sbin" / "dockerd").exists():
        raise RuntimeError("Debian's docker.io is not unpacked in .cache/debs: run `make setup`")
    return {**os.environ, "PATH": f"{DEBS}/usr/sbin:{DEBS}/usr/bin:{os.environ.get('PATH', '/usr/sbin:/usr/bin')}"}


@dataclass(frozen=True)
class Engine:
    folder: Path  # exec root, pidfile, socket, the CLI's config: all removed at the end
    socket: Path
    data_root: Path
    log: Path

    @property
    def env(self) -> dict[str, str]:
        return {**engine_env(), "DOCKER_HOST": f"unix://{self.socket}", "DOCKER_CONFIG": str(self.folder / "cli"),
                "DOCKER_BUILDKIT": "0"}  # the classic builder: BuildKit is a separate daemon, not in docker.io 20.10

    def docker(self, *args: str, check: bool = True, timeout: float | None = None,
               input: str | bytes | None = None, text: bool = True) -> subprocess.CompletedProcess:
        """`docker ARGS` against this engine; output captured. With check, a failure raises with docker's message."""
        result = subprocess.run([str(DEBS / "usr" / "bin" / "docker"), *args], env=self.env, capture_output=True,
                                text=text, timeout=timeout, input=input)
        if check and result.returncode != 0:
            stderr = result.stderr if text else result.stderr.decode(errors="replace")
            raise RuntimeError(f"docker {' '.join(args[:2])} failed (exit {result.returncode}): {stderr.strip()}")
        return result


def _mounts_under(folder: Path) -> list[str]:
    """Mount points at or under `folder` (deepest first), from this process's mount table."""
    points = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        point = line.split()[4].replace("\\040", " ")
        if point == str(folder) or point.startswith(f"{folder}/"):
            points.append(point)
    return sorted(points, key=len, reverse=True)


def _sigterm_to_exit(signum, frame):
    raise SystemExit(128 + signum)


@contextmanager
def running(data_root: Path | None = None) -> Iterator[Engine]:
    """Start a dockerd of this run's own; stop it and remove its folders whatever happens (see the docstring)."""
    env = engine_env()
    folder = Path(tempfile.mkdtemp(prefix="dockerd-", dir="/tmp"))  # short: unix socket paths end at 108 bytes
    engine = Engine(folder=folder, socket=folder / "docker.sock", data_root=data_root or folder / "data",
                    log=folder / "dockerd.log")
    previous = None
    try:  # SIGTERM (a CI timeout, the rehearsal's stop) must reach the finally below, as Ctrl-C does; a caller
        # that handles SIGTERM already (pytest's fixtures, the rehearsal: KeyboardInterrupt) keeps its handling
        if signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
            previous = signal.signal(signal.SIGTERM, _sigterm_to_exit)
    except ValueError:
        pass  # not the main thread: the caller's own handling applies
    process = None
    try:
        engine.data_root.mkdir(parents=True, exist_ok=True)
        with open(engine.log, "wb") as log:
            process = subprocess.Popen(
                ["dockerd", "--data-root", str(engine.data_root), "--exec-root", str(folder / "exec"),
                 "--pidfile", str(folder / "dockerd.pid"), "-H", f"unix://{engine.socket}",
                 "--iptables=false", "--ip-masq=false", "--bridge=none", "--storage-driver=overlay2",
                 "--shutdown-timeout", "5", "--userland-proxy=false"],
                env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + READY_TIMEOUT_S
        while engine.docker("version", check=False, timeout=10).returncode != 0:
            if process.poll() is not None or time.monotonic() > deadline:
                lines = [line for line in engine.log.read_text(errors="replace").splitlines() if line.strip()]
                how = f"exit {process.returncode}" if process.poll() is not None else f"no answer in {READY_TIMEOUT_S} s"
                raise RuntimeError(f"dockerd did not start ({how}): {lines[-1] if lines else 'no message'}")
            time.sleep(0.3)
        yield engine
    finally:
        if previous is not None:  # a second SIGTERM must not abandon the clean-up below
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
        if process is not None:
            _stop(process, folder)
        for point in _mounts_under(folder) + (_mounts_under(engine.data_root) if data_root else []):
            subprocess.run(["umount", "-l", point], capture_output=True)
        shutil.rmtree(folder, ignore_errors=True)
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)


def _stop(process: subprocess.Popen, folder: Path) -> None:
    """dockerd stops its containers and its containerd on SIGTERM; anything of this engine left after that (a
    shim whose container would not die) is killed by its pid, found by this engine's folder in its command line."""
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if str(folder) in cmdline and int(proc.name) != os.getpid():
            try:
                os.kill(int(proc.name), signal.SIGKILL)
            except ProcessLookupError:
                pass


def debian_mirror(sources: list[Path] | None = None) -> str:
    """The Debian mirror this machine's apt uses for SUITE (one-line or deb822 sources), else Debian's CDN."""
    sources = sources if sources is not None else [Path("/etc/apt/sources.list"),
                                                   *sorted(Path("/etc/apt/sources.list.d").glob("*"))]
    for path in sources:
        try:
            text = path.read_text()
        except OSError:
            continue
        uris = []
        for line in text.splitlines():
            words = line.split()
            if len(words) >= 3 and words[0] == "deb" and words[2] == SUITE and "security" not in words[1]:
                return words[1]
            if words[:1] == ["URIs:"]:
                uris = words[1:]
            if words[:1] == ["Suites:"] and SUITE in words[1:] and uris and "security" not in uris[0]:
                return uris[0]
    return "http://deb.debian.org/debian"


def base_rootfs() -> Path:
    """A tar of Debian SUITE minbase made by debootstrap, cached in .cache/docker (made once, ~30 s)."""
    tarball = CACHE / f"{STAND_IN}.tar"
    if tarball.exists():
        return tarball
    CACHE.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="debootstrap-", dir=CACHE))
    try:
        root = work / "root"
        made = subprocess.run(
            [str(DEBS / "usr" / "sbin" / "debootstrap"), "--variant=minbase", SUITE, str(root), debian_mirror()],
            env={**engine_env(), "DEBOOTSTRAP_DIR": str(DEBS / "usr" / "share" / "debootstrap")},
            capture_output=True, text=True)
        if made.returncode != 0:
            raise RuntimeError(f"debootstrap {SUITE} failed (exit {made.returncode}): "
                               f"{(made.stdout + made.stderr).strip().splitlines()[-1:]} (see {root}/debootstrap)")
        shutil.rmtree(root / "var" / "cache" / "apt" / "archives", ignore_errors=True)
        (root / "var" / "cache" / "apt" / "archives" / "partial").mkdir(parents=True)
        # The stand-in's only addition: this machine's CA bundle for pip (the real bases get nothing of the kind).
        bundle = root / IMAGE_CA_BUNDLE.lstrip("/")
        bundle.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(CA_BUNDLE, bundle)
        (root / "etc" / "pip.conf").write_text(f"[global]\ncert = {IMAGE_CA_BUNDLE}\n")  # pip's site-wide file
        partial = tarball.with_suffix(".tar.partial")
        subprocess.run(["tar", "--numeric-owner", "-C", str(root), "-cf", str(partial), "."], check=True)
        partial.rename(tarball)
        return tarball
    finally:
        for point in _mounts_under(work):  # debootstrap mounts /proc and /sys in the root while it runs
            subprocess.run(["umount", "-l", point], capture_output=True)
        shutil.rmtree(work, ignore_errors=True)


def base_image(engine: Engine) -> str:
    """BASE_IMAGE in this engine, imported from the cached rootfs unless the engine has it already."""
    if engine.docker("image", "inspect", BASE_IMAGE, check=False).returncode != 0:
        engine.docker("import", "--change", "CMD [\"bash\"]", str(base_rootfs()), BASE_IMAGE, timeout=600)
    # A kept data root holds older stand-ins' images: untag them, so pruning frees their layers.
    listed = engine.docker("image", "ls", "--format", "{{.Repository}}:{{.Tag}}", BASE_IMAGE.split(":")[0]).stdout
    for old in set(listed.split()) - {BASE_IMAGE}:
        engine.docker("image", "rm", old, check=False)
    return BASE_IMAGE


class BuildFailed(RuntimeError):
    """A `docker build` that failed; `str()` names the Dockerfile, the step and its last line of output."""


def failed_step(output: str) -> str:
    """The step a classic-builder build stopped at ("Step 7/14 : RUN ..."), and its last line of output."""
    steps = [line for line in output.splitlines() if line.startswith("Step ")]
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    step = steps[-1] if steps else "before its first step"
    return f"{step[:160]}: {lines[-1] if lines else 'no message'}"


def build(engine: Engine, dockerfile: Path, tag: str, *, target: str | None = None,
          build_args: dict[str, str] | None = None, context: Path = REPO_ROOT, timeout: float = 3600) -> str:
    """`docker build` of `dockerfile` (context: the repository, as `pulumi up` builds it) on the host's network
    (apt and pip reach their servers as the host does); returns the output, raises BuildFailed naming the step."""
    args = ["build", "--network", "host", "-f", str(dockerfile), "-t", tag]
    for name, value in (build_args or {}).items():
        args += ["--build-arg", f"{name}={value}"]
    if target:
        args += ["--target", target]
    result = engine.docker(*args, str(context), check=False, timeout=timeout)
    output = result.stdout + result.stderr
    if result.returncode != 0:
        raise BuildFailed(f"{dockerfile.name}: {failed_step(output)}{_space_hint(engine, output)}")
    return output


BUILD_SPACE_GB = 20  # measured 2026-11-26: the PyTorch image is 8.9 GB, and committing its pip layer needs it twice


def _space_hint(engine: Engine, output: str) -> str:
    """What a build that ran out of disk needs: a bare "no space left on device" names neither the folder nor how
    much (the first fresh-clone CI run here met it with three clones' engines on one disk)."""
    if "no space left on device" not in output:
        return ""
    free_gb = shutil.disk_usage(engine.data_root).free / 1e9
    return (f" (the engine's data root {engine.data_root} has {free_gb:.1f} GB free; building both images needs "
            f"about {BUILD_SPACE_GB} GB: free some, or remove an older .cache/docker)")
