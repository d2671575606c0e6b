"""Progress that never goes silent (training/progress.py) and validation every epoch (training/runner.py), pure:
an injected clock, a fake loop in place of a framework."""
import io
import json

import pytest

from training import launched, progress, runner
from training.config import parse_args, resolve_for_device


class Clock:
    def __init__(self):
        self.now = 100.0

    def __call__(self):
        return self.now


def test_durations_read_as_people_say_them():
    assert [progress.duration(s) for s in (0, 45.4, 185, 3720)] == ["0s", "45s", "3m05s", "1h02m"]


def test_the_eta_leaves_the_first_steps_start_up_out_once_there_are_later_steps():
    p = progress.Progress(total=10, global_batch=16, start_step=0, started=0.0, steps_per_epoch=5)
    assert p.eta(30.0) is None and p.status(30.0).startswith("starting")
    p.advance(1, 40.0)  # the first step took 40 s (model build, first batches)
    assert p.eta(40.0) == pytest.approx(9 * 40)
    p.advance(3, 44.0)  # then 2 s a step
    assert p.eta(44.0) == pytest.approx(7 * 2)
    assert p.status(44.0) == "step 3/10 (30%)  epoch 0.60  8.0 img/s  elapsed 44s  ETA 14s"


def test_a_log_gets_a_line_after_each_quiet_period_even_inside_one_long_step():
    clock, out = Clock(), io.StringIO()
    p = progress.Progress(total=4, global_batch=8, start_step=0, started=clock.now)
    beat = progress.Heartbeat(p, every=30, out=out, tty=False, clock=clock)
    clock.now += 29
    beat.tick()
    assert out.getvalue() == ""  # not yet
    clock.now += 1
    beat.tick()
    assert out.getvalue() == "progress: starting: building the model, reading the data, first step (elapsed 30s)\n"
    p.advance(1, clock.now)
    clock.now += 20
    beat.line("step 1/4 ...")  # a step line restarts the quiet time
    clock.now += 29
    beat.tick()
    assert out.getvalue().splitlines()[-1] == "step 1/4 ..."
    clock.now += 1
    beat.tick()
    assert out.getvalue().splitlines()[-1].startswith("progress: step 1/4 (25%)")


def test_a_terminal_gets_a_bar_redrawn_in_place_and_cleared_before_a_line():
    clock, out = Clock(), io.StringIO()
    p = progress.Progress(total=4, global_batch=8, start_step=0, started=clock.now)
    beat = progress.Heartbeat(p, every=30, out=out, tty=True, clock=clock)
    p.advance(2, clock.now + 1)
    beat.tick()
    assert out.getvalue().startswith("\r\x1b[2K[" + "#" * 12 + "-" * 12 + "] step 2/4 (50%)")
    beat.line("epoch 1/2  val top-1 0.500")
    assert out.getvalue().endswith("\r\x1b[2Kepoch 1/2  val top-1 0.500\n") and "\n" not in out.getvalue()[:-1]


def test_the_heartbeat_thread_writes_while_the_caller_is_busy():
    out = io.StringIO()
    beat = progress.Heartbeat(progress.Progress(total=2, global_batch=1, start_step=0, started=0.0), every=0.01,
                              out=out, tty=False, clock=lambda: 1e6).start()
    try:
        for _ in range(200):
            if "progress:" in out.getvalue():
                break
            import time
            time.sleep(0.01)
    finally:
        beat.stop()
    assert "progress: starting" in out.getvalue()


@pytest.mark.parametrize("env,rank0", [({}, True), ({"RANK": "1"}, False), ({"OMPI_COMM_WORLD_RANK": "0"}, True),
                                       ({"HOROVOD_RANK": "2"}, False),
                                       ({"TF_CONFIG": '{"task": {"type": "worker", "index": 1}}'}, False)])
def test_only_the_launchers_rank_0_prints_before_the_framework_is_set_up(env, rank0):
    assert launched.as_rank0(env) is rank0


class Tty(io.StringIO):
    def isatty(self):
        return True


@pytest.mark.parametrize("env,bar", [({}, True), ({"OMPI_COMM_WORLD_RANK": "0"}, False), ({"HOROVOD_RANK": "0"}, False),
                                     ({"RANK": "0"}, False)])
def test_a_rank_under_a_launcher_writes_lines_not_a_bar_even_on_a_pseudo_terminal(env, bar):
    """mpirun gives each rank a pseudo-terminal and forwards it line by line into stdout.txt: a bar's carriage
    returns and erase codes there ran into one line of thousands (the Keras rehearsal under horovodrun --mpi)."""
    assert launched.on_terminal(Tty(), env) is bar
    assert launched.on_terminal(io.StringIO(), {}) is False


class Writer:
    def __init__(self):
        self.scalars = []

    def scalar(self, tag, value, step):
        self.scalars.append((tag, step))

    def close(self):
        pass


class FakeLoop:
    """A framework's loop without a framework: steps that cost nothing, a validation that improves."""
    distribution, rank, size, device, checkpoint_suffix, step_times = "horovod", 0, 1, "cpu", ".pt", None

    def __init__(self, cfg):
        self.cfg = resolve_for_device(cfg, gpu=False)
        self.steps_per_epoch, self.evaluated, self.writer = 3, [], Writer()

    def fit(self, start, stop_at, lr_for, after_step):
        for step in range(start + 1, stop_at + 1):
            after_step(step, lambda: 1.0)
        return stop_at

    def evaluate(self):
        self.evaluated.append(len(self.evaluated))
        return 2.0 - 0.5 * len(self.evaluated), 0.25 * len(self.evaluated)

    def tensorboard(self, directory):
        return self.writer

    def broadcast_object(self, obj):
        return obj

    def checkpoint_state(self, step):
        return {"step": step}

    def save_checkpoint(self, state, path):
        path.write_text(json.dumps(state))

    def load_checkpoint(self, path):
        return json.loads(path.read_text())

    def export(self, out, card):
        return {}

    def peak_gpu_memory_mb(self):
        return None

    def shutdown(self):
        pass


def test_validation_runs_every_epoch_into_the_log_metrics_and_tensorboard(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr("training.report.write_for_run", lambda out: None)  # matplotlib's time, not this test's
    loops = []
    cfg = parse_args(["--output-dir", str(tmp_path), "--epochs", "3", "--log-every", "2", "--export"])
    summary = runner.run(cfg, lambda c: loops.append(FakeLoop(c)) or loops[-1])
    records = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [(r["step"], r["val_top1"]) for r in records if "val_top1" in r] == [(3, 0.25), (6, 0.5), (9, 0.75)]
    assert ("val/top1", 3) in loops[0].writer.scalars and ("val/loss", 9) in loops[0].writer.scalars
    assert summary["top1"] == 0.75 and summary["val_loss"] == 0.5 and len(loops[0].evaluated) == 3
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("python -m training train: ResNet50 with pytorch on synthetic data")
    assert lines[1].startswith("training ResNet50 (pytorch, horovod, 1 worker(s), cpu): 9 steps (3 epochs of 3), "
                               "image 64 px, batch 16 per worker (global 16), 1 loader process(es)")
    assert lines[1].endswith("; no GPU, so CPU-sized defaults: --image-size 64, --batch-size 16, --workers 1 (give "
                             "the flag to change one)")  # --epochs was given
    assert "epoch 2/3  step 6/9  val loss 1.0000  val top-1 0.500" in lines
    assert any(line.startswith("step 2/9") and " ETA " in line for line in lines)
