"""The best validation's model is the one exported, and a run at or near chance says so with the fix
(training/best.py, through training/runner.py), pure: a fake loop in place of a framework, whose "weights" are the
step they were taken at."""
import json

import pytest

from training import best, runner
from training.config import parse_args, resolve_for_device


class Writer:
    def scalar(self, tag, value, step):
        pass

    def close(self):
        pass


class ScriptedLoop:
    """Steps that cost nothing; each validation answers the next (loss, top-1) of `script`; export records which
    step's weights it was handed (restore puts a saved step's back)."""
    distribution, rank, size, device, checkpoint_suffix, step_times = "horovod", 0, 1, "cpu", ".pt", None

    def __init__(self, cfg, script):
        self.cfg = resolve_for_device(cfg, gpu=False)
        self.steps_per_epoch, self.script, self.weights, self.exported = 3, list(script), 0, None

    def fit(self, start, stop_at, lr_for, after_step):
        for step in range(start + 1, stop_at + 1):
            self.weights = step  # the model changes every step
            after_step(step, lambda: 1.0)
        return stop_at

    def evaluate(self):
        return self.script.pop(0)

    def tensorboard(self, directory):
        return Writer()

    def broadcast_object(self, obj):
        return obj

    def checkpoint_state(self, step):
        return {"step": step, "weights": self.weights}

    def save_checkpoint(self, state, path):
        path.write_text(json.dumps(state))

    def load_checkpoint(self, path):
        return json.loads(path.read_text())

    def restore(self, state):
        self.weights = state["weights"]

    def export(self, out, card):
        self.exported = self.weights
        return {"onnx": str(out / "model.onnx")}

    def peak_gpu_memory_mb(self):
        return None

    def shutdown(self):
        pass


def _train(tmp_path, script, *flags, monkeypatch):
    monkeypatch.setattr("training.report.write_for_run", lambda out: None)  # matplotlib's time, not this test's
    loops = []
    cfg = parse_args(["--output-dir", str(tmp_path / "run"), "--epochs", "3", "--export", *flags])
    summary = runner.run(cfg, lambda c: loops.append(ScriptedLoop(c, script)) or loops[-1])
    return summary, loops[0]


def test_the_best_validations_model_is_exported_and_said(tmp_path, capsys, monkeypatch):
    # epochs 1-3: top-1 0.5, 1.0, 0.75 (the last epoch falls back, as README's synthetic folder did)
    summary, loop = _train(tmp_path, [(1.0, 0.5), (0.2, 1.0), (0.6, 0.75)], monkeypatch=monkeypatch)
    assert loop.exported == 6  # epoch 2's weights, not the last step's (9)
    assert summary["top1"] == 1.0 and summary["val_loss"] == 0.2 and summary["exported_step"] == 6
    assert summary["last_val_top1"] == 0.75 and summary["last_val_loss"] == 0.6
    out = capsys.readouterr().out
    assert ("model: exported the best validation's, epoch 2 (step 6): val top-1 1.000, val loss 0.2000 (the last "
            "validation: top-1 0.750, loss 0.6000)") in out
    assert json.loads((tmp_path / "run" / "summary.json").read_text())["exported_step"] == 6
    assert json.loads((tmp_path / "run" / best.BEST_JSON).read_text()) == {"step": 6, "val_loss": 0.2, "val_top1": 1.0}


def test_when_the_last_validation_is_the_best_nothing_is_restored(tmp_path, capsys, monkeypatch):
    summary, loop = _train(tmp_path / "a", [(1.0, 0.5), (0.5, 0.75), (0.5, 0.75)], monkeypatch=monkeypatch)
    # epochs 2 and 3 tie (top-1 0.75, loss 0.5): a tie goes to the lower loss, so epoch 2 stays the best
    assert loop.exported == 6 and summary["exported_step"] == 6
    capsys.readouterr()
    summary, loop = _train(tmp_path / "b", [(1.0, 0.5), (0.8, 0.6), (0.3, 0.9)], monkeypatch=monkeypatch)
    assert loop.exported == 9 and summary["exported_step"] == 9 and summary["top1"] == 0.9
    assert summary["best_val_step"] == 9 and summary["last_val_top1"] == 0.9
    assert "exported the best validation's" not in capsys.readouterr().out


def test_a_resumed_run_keeps_comparing_against_the_best_before_it(tmp_path):
    out = tmp_path / "run"
    out.mkdir()
    first = best.Keeper(out, ".pt", resumed=False)
    save = lambda state, path: path.write_text(json.dumps(state))  # noqa: E731
    assert first.offer(3, 0.4, 0.9, lambda: {"weights": 3}, save)
    again = best.Keeper(out, ".pt", resumed=True)
    assert again.best == best.Best(3, 0.4, 0.9)
    assert not again.offer(6, 0.5, 0.8, lambda: {"weights": 6}, save)  # worse than before the resume
    assert again.restore_for_export(9, lambda p: json.loads(p.read_text()), lambda s: None) == best.Best(3, 0.4, 0.9)
    assert best.Keeper(out, ".pt", resumed=False).best is None  # a fresh run starts afresh


def _three_class_folder(root, val_per_class=8):
    for split, count in (("train", 22), ("val", val_per_class)):
        for cls in ("circle", "square", "triangle"):
            (root / split / cls).mkdir(parents=True)
            for i in range(count):
                (root / split / cls / f"{i}.jpg").write_bytes(b"")  # listed, never decoded by the fake loop
    return root


def test_a_run_at_chance_ends_with_the_line_naming_the_fix(tmp_path, capsys, monkeypatch):
    data = _three_class_folder(tmp_path / "shapes")
    summary, _ = _train(tmp_path, [(87.0, 1 / 3), (239.0, 1 / 3), (1.46, 1 / 3)], "--data", str(data),
                        monkeypatch=monkeypatch)
    last = capsys.readouterr().out.rstrip().splitlines()[-1]
    assert last.startswith("warning: val top-1 0.333 is at chance for 3 classes (0.333) over 24 validation images: "
                           "this model guesses; fine-tune from ImageNet weights: add --pretrained")
    assert "--init-from resnet50-11ad3fa6.pth" in last


def test_a_run_clearly_above_chance_says_nothing_of_it(tmp_path, capsys, monkeypatch):
    data = _three_class_folder(tmp_path / "shapes")
    _train(tmp_path, [(1.0, 0.5), (0.5, 0.9), (0.9, 0.6)], "--data", str(data), monkeypatch=monkeypatch)
    assert "chance" not in capsys.readouterr().out


@pytest.mark.parametrize("top1,classes,images,near", [
    (1 / 3, 3, 24, True), (0.5, 3, 24, True), (0.55, 3, 24, False),  # 2 standard errors at chance: 0.192
    (0.41, 3, 3000, True), (0.45, 3, 3000, False),  # a quarter of chance above it: 0.417
    (0.0012, 1000, 50000, True), (0.004, 1000, 50000, False),
    (0.41, 3, None, True), (0.42, 3, None, False),  # no count: a quarter of chance
])
def test_near_chance_is_two_standard_errors_or_a_quarter_of_chance_above_it(top1, classes, images, near):
    assert best.near_chance(top1, classes, images) is near


def test_a_fine_tuned_run_at_chance_is_told_another_fix():
    line = best.chance_line(0.34, 3, 24, fine_tuned=True)
    assert "near chance" in line and "more images per class" in line and "--pretrained" not in line
    assert best.chance_line(None, 3, 24, fine_tuned=False) is None


def test_on_a_terminal_the_second_line_goes_below_the_bar_not_onto_it(tmp_path, monkeypatch):
    import io

    from training import progress

    out, made = io.StringIO(), []

    class Terminal(progress.Heartbeat):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **{**kwargs, "out": out, "tty": True})
            made.append(self)

    monkeypatch.setattr(progress, "Heartbeat", Terminal)
    monkeypatch.setattr("training.report.write_for_run", lambda out: None)
    cfg = parse_args(["--output-dir", str(tmp_path / "run"), "--epochs", "1", "--no-export"])

    def build(c):
        made[0].tick()  # the bar, drawn while the model is built
        return ScriptedLoop(c, [(1.0, 0.5)])

    runner.run(cfg, build)
    assert "\r\x1b[2Ktraining ResNet50 (pytorch" in out.getvalue()  # the bar cleared, then the line
