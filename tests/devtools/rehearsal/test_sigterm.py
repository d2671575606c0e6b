"""SIGTERM ends a rehearsal with everything it started (issue 47: a child process and Azurite stayed): main()
unwinds its `with`s as for Ctrl-C. The rehearsal itself is played by a stand-in that starts what it starts first,
Azurite (the real one) and a child process, then waits; the real run needs root and minutes."""
import os
import select
import signal
import subprocess
import sys
import textwrap
import time

from infra import REPO_ROOT

SCRIPT = textwrap.dedent("""
    import subprocess, sys, time
    from pathlib import Path
    from devtools.rehearsal import run

    def rehearse(stack, nodes, framework, train_args, work, *rest, **kw):
        from devtools.emulator import Azurite
        with Azurite(location=Path(work) / "azurite") as azurite:
            child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"])
            try:  # as the Pool ends its nodes' processes on the way out
                print(azurite.process.pid, child.pid, flush=True)
                subprocess.run([sys.executable, "-c", "import time; time.sleep(300)"])  # as `logs --follow` runs
            finally:
                child.kill()
                child.wait()

    run.rehearse = rehearse
    sys.exit(run.main(["--work", sys.argv[1]]))
""")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as stat:  # a zombie has ended: only its parent has not reaped it yet
        return stat.read().split(")")[-1].split()[0] != "Z"


def test_sigterm_ends_the_rehearsal_and_what_it_started(tmp_path):
    proc = subprocess.Popen([sys.executable, "-c", SCRIPT, str(tmp_path / "work")], cwd=REPO_ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        # What it started holds the pipe too: a stand-in that failed must fail the test, not hang it.
        assert select.select([proc.stdout], [], [], 60)[0], "the stand-in rehearsal said nothing in 60 s"
        first = proc.stdout.readline().split()
        assert len(first) == 2, (first, proc.poll())
        azurite, child = (int(pid) for pid in first)
        time.sleep(0.3)  # into subprocess.run's wait
        proc.send_signal(signal.SIGTERM)
        # Its pipes close once it and all it started have ended: a child left behind times this out.
        _, err = proc.communicate(timeout=30)
        assert proc.returncode == 130 and "stopped (Ctrl-C or SIGTERM)" in err
        deadline = time.monotonic() + 5
        while (_alive(azurite) or _alive(child)) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not _alive(azurite), "Azurite still runs"
    finally:
        proc.kill()
        proc.wait()
