"""What the rehearsal tests share: starting a rehearsal, a job verb from another shell, serving an ended
rehearsal again, a member's folder of JPEGs (two test files, so that pytest-xdist runs them side by side)."""
import contextlib
import json
import subprocess
import sys
import time

from infra import REPO_ROOT
from infra.backends.shared import REHEARSAL_FILE
from tests.infra.backends.batch import job_nodes

WHY_NOT = job_nodes.unavailable()  # why this machine cannot host the rehearsal's nodes, or ''
FAST = "--num-classes 4 --image-size 32 --batch-size 8 --steps 30 --log-every 5 --checkpoint-every 10 --workers 1"
# A member's job: --num-classes left out (the folder's), a few steps on one node.
MEMBER_ARGS = "--image-size 32 --batch-size 8 --steps 4 --log-every 2 --checkpoint-every 100 --workers 1"


def rehearse(*args, timeout=900):
    result = subprocess.run([sys.executable, "-m", "infra", "rehearse", "--stack", "dev", *args], cwd=REPO_ROOT,
                            capture_output=True, text=True, timeout=timeout)
    return result


def verb(*args, timeout=600):
    """A job verb in its own process, as a user runs it from another shell."""
    return subprocess.run([sys.executable, "-m", "infra", *args, "--stack", "dev"], cwd=REPO_ROOT,
                          capture_output=True, text=True, timeout=timeout)


@contextlib.contextmanager
def served(work):
    """`python -m devtools rehearse --serve`: an ended rehearsal's local Azure again, for the verbs."""
    process = subprocess.Popen([sys.executable, "-m", "devtools", "rehearse", "--stack", "dev", "--serve", "--work",
                                str(work)], cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        while json.loads((work / REHEARSAL_FILE).read_text())["pid"] != process.pid:
            assert process.poll() is None and time.monotonic() < deadline, process.communicate()
            time.sleep(0.5)
        yield
    finally:
        process.terminate()
        process.communicate(timeout=60)


def start_rehearsal(work, train_args, *flags):
    process = subprocess.Popen([sys.executable, "-m", "infra", "rehearse", "--stack", "dev", "--nodes", "2",
                                "--framework", "pytorch", f"--args={train_args}", "--work", str(work), *flags],
                               cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 300
    while not (work / "batch-state.json").exists():  # written when the job is submitted
        assert process.poll() is None and time.monotonic() < deadline, process.communicate()
        time.sleep(0.5)
    return process


def pets(root):
    """A team member's own folder: real JPEGs of 3 classes, train/ and val/."""
    from PIL import Image

    for split, per_class in (("train", 8), ("val", 2)):
        for shade, cls in enumerate(("cat", "dog", "ship")):
            (root / split / cls).mkdir(parents=True)
            for i in range(per_class):
                image = Image.new("RGB", (48, 48), (100 * shade, 25 * i, 200 - 100 * shade))
                image.save(root / split / cls / f"{i}.jpg")
    return root
