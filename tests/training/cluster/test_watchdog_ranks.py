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


def test_a_stopped_rank_ends_the_run_within_the_bound_naming_its_host(tmp_path):
    out = tmp_path / "run"
    command = [TORCH.python, "-m", "training", "launch", "--hosts", "localhost:2", "--", "--data", "synthetic",
               "--steps", "400", "--image-size", "32", "--batch-size", "2", "--workers", "1", "--log-every", "2",
               "--no-export", "--num-classes", "4", "--checkpoint-every", "3", "--keep-checkpoints", "1",
               "--output-dir", str(out)]
    with open(tmp_path / "stderr.txt", "w") as stderr:
        proc = subprocess.Popen(command, cwd=REPO_ROOT, env={**TORCH.env(), **BOUNDS}, stdout=subprocess.DEVNULL,
                                stderr=stderr)
    stopped = None
    try:
        # a checkpoint on disk and rank 1 past it
        _wait_for(lambda: list((out / "checkpoints").glob("ckpt-*.pt")) if (out / "checkpoints").is_dir() else None,
                  180, "checkpoint")
        rank1 = _wait_for(lambda: (r := _rank(out, 1)) and r["step"] >= 4 and r, 60, "rank 1 past step 4")
        stopped = rank1["pid"]
        os.kill(stopped, signal.SIGSTOP)
        since = time.monotonic()
        rc = proc.wait(timeout=90)
        took = time.monotonic() - since
    finally:
        if stopped:
            for signum in (signal.SIGCONT, signal.SIGKILL):
                try:
                    os.kill(stopped, signum)
                except ProcessLookupError:
                    pass
        if proc.poll() is None:
            proc.kill()
    err = (tmp_path / "stderr.txt").read_text()
    print(f"stopped rank 1 at step {rank1['step']}; the run ended {took:.1f} s later")
    assert rc == EXIT_HANG, err[-3000:]
    # the step bound (4 s, or the busy 8 s when rank 0 waited in a logged step's average) + two looks at the signs of
    # life, well before Horovod's own Gloo timeout (30 s)
    assert took < 25, (took, err[-3000:])
    verdict = [line for line in err.splitlines() if line.startswith("fault: ")]
    assert verdict and verdict[0].startswith("fault: node localhost: hang (no training step for "), \
        err[-3000:]
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
