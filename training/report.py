"""report.png: a run's loss, LR, img/s, validation loss and top-1 against step, with its summary in the title; several
runs side by side. The top-1 panel draws chance (1 / classes) as a dashed line, and the exported model's step (the
best validation's: training/best.py) as a dot.

Every run writes its own (rank 0, after summary.json); `python -m training report RUN_DIR... --out FILE` draws
runs on shared axes to compare them (a framework against another, a setting against another, a resumed run).
Reads only metrics.jsonl and summary.json, so it works on a run folder fetched with `python -m infra download`.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from training.errors import UsageError

PANELS = (("loss", "loss"), ("lr", "learning rate"), ("img_per_sec", "images/s (global)"),
          ("val_loss", "validation loss"), ("val_top1", "validation top-1"))


def chance(summary: dict) -> float | None:
    """Top-1 of guessing: 1 / the run's classes (summary.json's `classes`), or None when the run names none."""
    classes = summary.get("classes")
    return 1.0 / len(classes) if classes and len(classes) > 1 else None


def read_run(run_dir: Path) -> tuple[list[dict], dict]:
    """(training records by step, summary or {}); a record cut short by a crash is skipped."""
    records, _, summary = read_records(run_dir)
    return records, summary


def read_records(run_dir: Path) -> tuple[list[dict], list[dict], dict]:
    """(training records by step, validation records by step, summary or {}): metrics.jsonl holds both, a
    validation's record by its val_loss and val_top1."""
    path = run_dir / "metrics.jsonl"
    if not path.is_file():
        raise UsageError(f"{run_dir}: no metrics.jsonl (not a run folder of `python -m training train`)")
    records, validations = {}, {}
    for line in path.read_text().splitlines():
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            continue
        # a resumed run may log a step again: the latest wins
        (validations if "val_top1" in record else records)[record["step"]] = record
    summary_path = run_dir / "summary.json"
    summary = json.loads(summary_path.read_text()) if summary_path.is_file() else {}
    return ([records[step] for step in sorted(records)], [validations[step] for step in sorted(validations)],
            summary)


def title_of(run_dir: Path, summary: dict) -> str:
    if not summary:
        return f"{run_dir.name}: unfinished"
    top1 = f", top-1 {summary['top1']:.3f}" if summary.get("top1") is not None else ""
    return (f"{run_dir.name}: {summary['framework']}, {summary['world_size']} worker(s), step {summary['steps']}, "
            f"{summary['img_per_sec']:.1f} img/s, loss {summary['final_loss']:.3f}{top1}")


def draw(runs: list[Path], out: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")  # files only: no display on a node or in CI
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(1, len(PANELS), figsize=(5 * len(PANELS), 4), constrained_layout=True)
    titles, chances = [], set()
    top1_axes = axes[[key for key, _ in PANELS].index("val_top1")]
    for run_dir in runs:
        records, validations, summary = read_records(run_dir)
        titles.append(title_of(run_dir, summary))
        for ax, (key, _) in zip(axes, PANELS):
            shown = validations if key.startswith("val_") else records
            line, = ax.plot([r["step"] for r in shown], [r[key] for r in shown],
                            marker="." if len(shown) < 50 else None, label=run_dir.name)
        exported = summary.get("exported_step")
        if exported is not None and summary.get("top1") is not None:
            top1_axes.plot([exported], [summary["top1"]], "o", color=line.get_color(), fillstyle="none",
                           markersize=10, label=f"{run_dir.name}: exported (best validation)")
        if chance(summary) is not None:
            chances.add(chance(summary))
    for level in sorted(chances):
        top1_axes.axhline(level, color="grey", linestyle="--", linewidth=1, label=f"chance ({level:.3f})")
    if chances or any(line.get_label().endswith("(best validation)") for line in top1_axes.get_lines()):
        top1_axes.legend(fontsize="small")
    for ax, (key, label) in zip(axes, PANELS):
        ax.set_xlabel("step")
        ax.set_ylabel(label)
        ax.grid(alpha=0.3)
        shown = [y for line in ax.get_lines() for y in line.get_ydata() if line.get_linestyle() != "--"]
        if key.endswith("loss") and shown and min(shown) > 0 and max(shown) / min(shown) > 100:
            ax.set_yscale("log")  # a from-scratch run's val loss spans 3.4 to 652 (issue 60): both ends readable
    if len(runs) > 1:
        axes[0].legend(fontsize="small")
    figure.suptitle("\n".join(titles), fontsize="medium")
    tmp = out.with_name(out.name + ".tmp.png")
    figure.savefig(tmp, dpi=100)
    plt.close(figure)
    tmp.replace(out)
    return out


def write_for_run(run_dir: Path) -> Path | None:
    """The run's own report.png; a missing plotting library costs the picture, never the run."""
    try:
        return draw([run_dir], run_dir / "report.png")
    except ImportError as err:
        print(f"warning: no report.png ({err})", file=sys.stderr)
        return None


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m training report", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("runs", nargs="+", type=Path, help="run folders (--output-dir of train)")
    parser.add_argument("--out", type=Path, default=Path("report.png"), help="PNG to write (default: report.png)")
    args = parser.parse_args(argv)
    for run_dir in args.runs:
        read_run(run_dir)  # every folder checked before anything is drawn
    print(f"report: {draw(args.runs, args.out)} ({len(args.runs)} run(s))")
    return 0
