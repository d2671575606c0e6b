"""A hang ends: two real Horovod ranks (Gloo, CPU, .venv-torch) started by `python -m training launch`; rank 1
is stopped (SIGSTOP: its collective never answers, as a frozen host's would) and rank 0's watchdog ends the run
within its bound with the line naming rank 1's host; the checkpoint written before is intact and the attempt is
recorded as a node fault. Small bounds from the environment keep it to seconds."""
import json
import os
import signal
import subprocess
import time

import pytest

from infra import REPO_ROOT
from tests.training.training_env import TrainingEnv
from training import frameworks
from training.errors import EXIT_CODE_FAULT, EXIT_HANG

TORCH = TrainingEnv(frameworks.get("pytorch").image.venv)
BOUNDS = {"TRAINING_WATCHDOG_FIRST_S": "60", "TRAINING_WATCHDOG_FLOOR_S": "4", "TRAINING_WATCHDOG_FACTOR": "4",
          "TRAINING_WATCHDOG_BUSY_S": "8", "TRAINING_WATCHDOG_POLL_S": "0.5"}
pytestmark = pytest.mark.skipif(not (REPO_ROOT / frameworks.get("pytorch").image.venv / ".installed").exists(),
                                reason="needs .venv-torch (make setup)")


def _wait_for(predicate, timeout, what):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = predicate()
        if found:
            return found
        time.sleep(0.2)
    raise AssertionError(f"no {what} within {timeout} s")


def _rank(out, rank):
    try:
        return json.loads((out / ".watchdog" / f"rank-{rank}.json").read_text())
    except (OSError, ValueError):
        return None


def _launch(tmp_path, out, env, steps=400, extra=()):
    command = [TORCH.python, "-m", "training", "launch", "--hosts", "localhost:2", "--", "--data", "synthetic",
               "--steps", str(steps), "--image-size", "32", "--batch-size", "2", "--workers", "1", "--log-every", "1",
               "--no-export", "--num-classes", "4", *extra, "--output-dir", str(out)]
    stderr = open(tmp_path / "stderr.txt", "w")
    proc = subprocess.Popen(command, cwd=REPO_ROOT, env={**TORCH.env(), **FROZEN, **env}, stdout=subprocess.DEVNULL,
                            stderr=stderr)
    stderr.close()
    return proc


# The busy bound (a checkpoint) far above the step bound, and Horovod's Gloo timeout above both: only the watchdog's
# step bound can end these runs within the test's limit.
FROZEN = {**BOUNDS, "TRAINING_WATCHDOG_BUSY_S": "120", "TRAINING_WATCHDOG_FIRST_S": "120",
          "HOROVOD_GLOO_TIMEOUT_SECONDS": "300"}


def _end_of(proc, out, timeout):
    """(exit code, seconds from rank 0's sign of life at step 5 to the run's end)."""
    pid = None
    try:
        _wait_for(lambda: (r := _rank(out, 0)) and r["step"] >= 5, 180, "rank 0 at step 5")
        since = time.monotonic()
        pid = (_rank(out, 1) or {}).get("pid")
        rc = proc.wait(timeout=timeout)
        return rc, time.monotonic() - since
    finally:
        pid = pid or (_rank(out, 1) or {}).get("pid")
        for signum in (signal.SIGCONT, signal.SIGKILL):
            try:
                if pid:
                    os.kill(pid, signum)
            except ProcessLookupError:
                pass
        if proc.poll() is None:
            proc.kill()


def test_a_rank_frozen_after_a_logged_step_ends_the_run_within_the_step_bound_naming_its_host(tmp_path):
    """Rank 1 freezes whole (SIGSTOP: a frozen host) right after step 5, before the log line's averaged loss, a
    collective every rank joins. Rank 0 waits in it under the step bound (4 s), not the busy one (120 s), and ends
    the run naming rank 1's host; the checkpoint written before is intact and the attempt is a node fault."""
    out = tmp_path / "run"
    proc = _launch(tmp_path, out, {"TRAINING_WATCHDOG_INJECT": "stop@5:1"},
                   extra=("--checkpoint-every", "3", "--keep-checkpoints", "1"))
    rc, took = _end_of(proc, out, timeout=90)
    err = (tmp_path / "stderr.txt").read_text()
    print(f"rank 1 stopped after step 5; the run ended {took:.1f} s after rank 0 reached it")
    assert rc == EXIT_HANG, err[-3000:]
    assert took < 25, (took, err[-3000:])  # the step bound (4 s) + two looks (1.5 s) + the launcher, not 120 s
    verdict = [line for line in err.splitlines() if line.startswith("fault: ")]
    assert verdict and verdict[0].startswith("fault: node localhost: hang (no training step for "), err[-3000:]
    assert "rank 1 on host localhost stopped (no sign of life)" in verdict[0]
    attempt = json.loads((out / "attempts.jsonl").read_text())
    assert (attempt["attempt"], attempt["kind"], attempt["exit_code"], attempt["reason"], attempt["blamed_hosts"]) == (
        1, "node", EXIT_HANG, "hang", ["localhost"])
    # the checkpoint written before the hang loads, at a step rank 0 had done
    ckpt = sorted((out / "checkpoints").glob("ckpt-*.pt"))[-1]
    loaded = subprocess.run([TORCH.python, "-c", "import sys, torch; s = torch.load(sys.argv[1], weights_only=False);"
                             " print(s['step'])", str(ckpt)], capture_output=True, text=True, timeout=120)
    assert loaded.returncode == 0, loaded.stderr[-2000:]
    assert int(loaded.stdout) == int(ckpt.stem.removeprefix("ckpt-")) >= 3


def test_a_rank_stuck_while_its_process_lives_is_named_as_the_one_that_lags(tmp_path):
    """Rank 1's main thread blocks for good after step 5 (a GPU stuck in a kernel: the process and its watchdog
    threads live, so its signs of life keep coming). Its progress stays behind rank 0's, which entered the log
    line's collective: rank 1's host is named, not "all ranks alive"."""
    out = tmp_path / "run"
    proc = _launch(tmp_path, out, {"TRAINING_WATCHDOG_INJECT": "hang@5:1"})
    rc, took = _end_of(proc, out, timeout=90)
    err = (tmp_path / "stderr.txt").read_text()
    print(f"rank 1 stuck after step 5; the run ended {took:.1f} s after rank 0 reached it")
    assert rc == EXIT_HANG and took < 25, (rc, took, err[-3000:])
    verdict = [line for line in err.splitlines() if line.startswith("fault: ")]
    assert verdict and verdict[0].startswith("fault: node localhost: stuck rank (no training step for "), err[-3000:]
    assert "rank 1 on host localhost (at step 5, step 5 done) lags the others while its process lives" in verdict[0]
    assert "all 2 ranks are alive" not in err


def test_an_exception_in_the_loop_is_a_code_fault_and_batchs_retry_of_it_does_not_train(tmp_path):
    out = tmp_path / "run"
    command = [TORCH.python, "-m", "training", "launch", "--hosts", "localhost:2", "--", "--data", "synthetic",
               "--steps", "40", "--image-size", "32", "--batch-size", "2", "--workers", "1", "--no-export",
               "--num-classes", "4", "--output-dir", str(out)]
    # as Batch runs it: a retry is the same job; rank 1 raises after step 2, as a bug in the loop would
    env = {**TORCH.env(), **BOUNDS, "AZ_BATCH_JOB_ID": "train-dev-abc", "TRAINING_WATCHDOG_INJECT": "raise@2:1"}
    first = subprocess.run(command, cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert first.returncode == EXIT_CODE_FAULT, first.stderr[-3000:]
    verdict = [line for line in first.stderr.splitlines() if line.startswith("fault: ")]
    assert verdict and verdict[0].startswith("fault: code: rank 1 (localhost) raised InjectedFault: "), \
        first.stderr[-3000:]
    retry = subprocess.run(command, cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert retry.returncode == EXIT_CODE_FAULT
    assert retry.stderr.splitlines()[-1].startswith("fault: code: not run again: attempt 1 of job train-dev-abc ended "
                                                    "on a code/data fault (exception, exit 65)")
    assert "Horovod" not in retry.stderr  # no rank started
    lines = [json.loads(line) for line in (out / "attempts.jsonl").read_text().splitlines()]
    assert [(a["attempt"], a["kind"], a["reason"]) for a in lines] == [(1, "code", "exception"),
                                                                      (2, "code", "retry refused")]
