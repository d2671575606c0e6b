"""report.png and `python -m training report`: drawn from metrics.jsonl and summary.json alone."""
import json
import struct
import subprocess
import sys

import pytest

from infra import REPO_ROOT

pytest.importorskip("matplotlib", reason="matplotlib is in requirements.txt and the training requirements")
from training import report  # noqa: E402


def fake_run(folder, framework, steps=10, torn=False):
    folder.mkdir(parents=True)
    lines = [json.dumps({"step": s, "epoch": s / 100, "loss": 7 - s * 0.3, "lr": 0.01 * s, "img_per_sec": 50 + s})
             for s in range(1, steps + 1)]
    # a validation's record at steps 5 and 10, beside the training record of the same step
    lines += [json.dumps({"step": s, "epoch": s / 100, "val_loss": 2.0, "val_top1": s / 20}) for s in (5, 10)
              if s <= steps]
    (folder / "metrics.jsonl").write_text("\n".join(lines) + ("\n{\"step\": 11, \"lo" if torn else "\n"))
    (folder / "summary.json").write_text(json.dumps({
        "framework": framework, "world_size": 2, "steps": steps, "img_per_sec": 55.5, "final_loss": 4.0, "top1": 0.5}))
    return folder


def png_size(path):
    header = path.read_bytes()[:24]
    assert header[:8] == b"\x89PNG\r\n\x1a\n"
    return struct.unpack(">II", header[16:24])


def test_each_run_gets_its_report_with_the_summary_in_the_title(tmp_path):
    run = fake_run(tmp_path / "r1", "pytorch", torn=True)  # a line cut short by a crash is skipped
    path = report.write_for_run(run)
    assert path == run / "report.png" and png_size(path) == (2500, 400)
    assert report.title_of(run, report.read_run(run)[1]) == \
        "r1: pytorch, 2 worker(s), step 10, 55.5 img/s, loss 4.000, top-1 0.500"
    assert [r["step"] for r in report.read_run(run)[0]] == list(range(1, 11))
    assert [r["val_top1"] for r in report.read_records(run)[1]] == [0.25, 0.5]  # validations kept apart


def test_the_report_command_draws_several_runs_side_by_side(tmp_path):
    runs = [fake_run(tmp_path / "torch", "pytorch"), fake_run(tmp_path / "keras", "keras", steps=6)]
    result = subprocess.run([sys.executable, "-m", "training", "report", *map(str, runs), "--out",
                             str(tmp_path / "both.png")], cwd=REPO_ROOT, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert "both.png (2 run(s))" in result.stdout and png_size(tmp_path / "both.png")[0] == 2500


def test_a_folder_that_is_not_a_run_is_one_clear_line_and_nothing_drawn(tmp_path):
    result = subprocess.run([sys.executable, "-m", "training", "report", str(tmp_path), "--out",
                             str(tmp_path / "x.png")], cwd=REPO_ROOT, capture_output=True, text=True)
    assert result.returncode == 2 and not (tmp_path / "x.png").exists()
    assert result.stderr.strip() == f"error: {tmp_path}: no metrics.jsonl (not a run folder of `python -m training train`)"


def test_the_top1_panel_draws_chance_and_the_exported_step(tmp_path):
    run = fake_run(tmp_path / "shapes", "pytorch")
    summary = json.loads((run / "summary.json").read_text())
    (run / "summary.json").write_text(json.dumps({**summary, "classes": ["circle", "square", "triangle"],
                                                  "exported_step": 5, "top1": 0.25}))
    assert report.chance(json.loads((run / "summary.json").read_text())) == pytest.approx(1 / 3)
    assert report.chance({"classes": None}) is None and report.chance({}) is None  # synthetic data: no chance line
    assert [key for key, _ in report.PANELS] == ["loss", "lr", "img_per_sec", "val_loss", "val_top1"]
    assert png_size(report.write_for_run(run)) == (2500, 400)
