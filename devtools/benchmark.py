"""ResNet50 training throughput on one device: the Horovod benchmark recipe, our settings on synthetic data, and
our settings on real JPEG files through each data path, side by side in one invocation, with ratios.

Every training figure comes from `python -m training train` (the real training loop, one worker):
  recipe          synthetic, fp32, batch 32, eager (pytorch) or without XLA (tensorflow, keras), as
                  horovod/examples/*/*_synthetic_benchmark.py run
  ours            synthetic, the trainer's defaults for the device (on a GPU: bf16, and channels-last for
                  pytorch) with torch.compile (pytorch) or, on a GPU, XLA (tensorflow), the largest batch that fits
  ours on JPEG    the same settings on ImageNet-sized JPEG files: `--loader dali` (where DALI is installed),
                  `--loader nvjpeg` and `--loader pil` (pytorch), tf.data (tensorflow, keras)
and for pytorch the data paths alone (no model: how many images per second each loader can deliver), which
says whether the loader or the GPU sets the pace. Columns: img/s, images over the time of the steps counted
(the first logged window, warm-up and compilation, left out; on JPEG files also the batches the loader read
ahead meanwhile), with 1.96 sigma of the windows' rates; peak memory (GPU: the framework's allocator; CPU: the
process's peak RSS); mean GPU utilisation over the steps counted (nvidia-smi, sampled every 0.2 s); the ratios.
It runs with whatever the machine has: one process of Horovod where Horovod is installed (as the cluster's job
trains), else PyTorch's DDP of one process; it prints the versions it ran with.

Run it from the framework's environment: `.venv-torch/bin/python -m devtools benchmark` (pytorch),
`.venv-tf/bin/python -m devtools benchmark --framework tensorflow` (or keras).

Examples:
  python -m devtools benchmark                          # 224 px and the largest batch that fits on a GPU
  python3 -m devtools benchmark --batch-size 256 --steps 40   # a device machine: torch + torchvision only
  python -m devtools benchmark --image-size 224 --steps 60 --batch-size 256 --data /data/imagenet
  python -m devtools benchmark --framework keras --skip-jpeg
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import platform
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from training import frameworks
from training.errors import UsageError
from training.metrics import mean_ci

PROBE_BATCHES = (256, 384, 512, 768, 1024)  # --batch-size auto on a GPU: the largest of these that fits
# Compilers ours leaves out on a CPU: XLA slows TensorFlow's ResNet50 down there (measured on 2 cores, 64 px, batch
# 64, fp32: 11.5 img/s with XLA, 14.9 without). torch.compile is used on both.
GPU_ONLY_COMPILERS = ("xla",)


@dataclass
class Run:
    name: str  # its output folder
    label: str  # "{settings}" is replaced by the settings the trainer used, from its summary
    flags: list[str]
    skip_steps: int = 0  # the rate counts the logged windows that start at or after this step
    summary: dict = field(default_factory=dict)
    windows: list[tuple[int, float]] = field(default_factory=list)  # (steps, img/s) of each window counted
    gpu_utilisation: float | None = None

    @property
    def rate(self) -> float:
        """Images over time across the windows counted. Not the mean of the windows' rates (the trainer's
        summary): a loader whose workers finish batches in bursts gives some windows at many times its rate,
        and their mean overstates it (on an H100 PIL's windows ranged over +-2,000 img/s around ~2,700-3,900)."""
        return sum(steps for steps, _ in self.windows) / sum(steps / rate for steps, rate in self.windows)

    @property
    def ci95(self) -> float:
        """1.96 sigma of the windows' rates: how steady the run was."""
        return mean_ci([rate for _, rate in self.windows])[1]

    @property
    def title(self) -> str:
        s = self.summary
        used = [s["precision"], *(name for name in ("channels_last", "compile", "xla") if s.get(name))]
        return self.label.replace("{settings}", ", ".join(used).replace("_", "-"))


def horovod_installed(framework: str) -> bool:
    try:
        return importlib.util.find_spec("horovod." + frameworks.get(framework).image.package) is not None
    except ModuleNotFoundError:  # no `horovod` package at all
        return False


def distribution(requested: str, framework: str, horovod: bool, compiling: bool = False) -> str:
    """--dist as the benchmark runs it: auto is Horovod where it is installed (one process, as the cluster's job
    trains), else pytorch's DDP of one process, and DDP wherever torch.compile runs (train refuses --compile with
    Horovod: its hooks would wait for the whole compiled backward); refused in one line where it cannot run."""
    if "ddp" not in frameworks.get(framework).dist:
        if requested == "ddp":
            raise UsageError(f"--dist ddp applies to {frameworks.which(lambda f: 'ddp' in f.dist)} only; {framework} "
                             "runs Horovod")
        if not horovod:
            raise UsageError(f"--framework {framework}: its training loop needs Horovod, which is not installed here")
        return "horovod"
    if requested == "horovod" and not horovod:
        raise UsageError("--dist horovod: Horovod is not installed here; use --dist ddp (or auto)")
    if requested == "horovod" and compiling:
        raise UsageError("--dist horovod runs eager (train refuses --compile with it); add --no-compile, or use "
                         "--dist ddp (or auto)")
    return requested if requested != "auto" else "horovod" if horovod and not compiling else "ddp"


def _torch_versions() -> list[str]:
    import torch
    import torchvision

    parts = [f"torch {torch.__version__}", f"torchvision {torchvision.__version__}",
             f"CUDA {torch.version.cuda}" if torch.version.cuda else "CUDA none (CPU build)"]
    if torch.cuda.is_available():
        parts.append(f"cuDNN {torch.backends.cudnn.version()}")
    return parts


def _tensorflow_versions() -> list[str]:
    import tensorflow as tf

    built = tf.sysconfig.get_build_info()
    return [f"tensorflow {tf.__version__}", f"CUDA {built.get('cuda_version', 'none (CPU build)')}"]


# What an image's ML package (the table's Image.package) says of itself besides its version: its companions, the CUDA
# it was built with. A package not listed here is reported by its version alone.
PACKAGE_VERSIONS = {"torch": _torch_versions, "tensorflow": _tensorflow_versions}


def versions(framework: str, gpu: str | None) -> str:
    """What this benchmark ran with: Python, the framework, CUDA and the GPU, Horovod and DALI where present."""
    from importlib.metadata import PackageNotFoundError, version

    fw = frameworks.get(framework)
    package = fw.image.package
    parts = [f"python {platform.python_version()}",
             *PACKAGE_VERSIONS.get(package, lambda: [f"{package} {version(package)}"])()]
    parts.append(f"GPU {gpu}" if gpu else "no GPU")
    try:
        parts.append(f"horovod {version('horovod')}" if horovod_installed(framework) else "no horovod")
    except PackageNotFoundError:
        parts.append("horovod (version unknown)")
    if "dali" in fw.loaders:
        from training.config import dali_installed

        if dali_installed():
            from nvidia import dali

            parts.append(f"DALI {dali.__version__}")
        else:
            parts.append("no DALI")
    return ", ".join(parts)


def gpu_name() -> str | None:
    """The first GPU's name from nvidia-smi, or None on a machine without one."""
    if not shutil.which("nvidia-smi"):
        return None
    result = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True,
                            text=True)
    return result.stdout.splitlines()[0].strip() if result.returncode == 0 and result.stdout.strip() else None


class UtilisationSampler:
    """nvidia-smi's GPU utilisation every 0.2 s while a run trains, each sample with its time, so the mean can be
    taken over the steps the rate counts (start-up and compilation take most of a short run's time)."""

    def __init__(self, enabled: bool):
        self.enabled, self.samples, self._stop = enabled, [], threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def _sample(self) -> None:
        command = ["nvidia-smi", "--query-gpu=utilization.gpu", "--format=csv,noheader,nounits", "--id=0"]
        while not self._stop.wait(0.2):
            result = subprocess.run(command, capture_output=True, text=True)
            if result.returncode == 0 and result.stdout.strip().isdigit():
                self.samples.append((time.time(), float(result.stdout.strip())))

    def __enter__(self):
        if self.enabled:
            self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        if self.enabled:
            self._thread.join()

    def mean(self, span: tuple[float, float]) -> float | None:
        """The mean of the samples taken within `span` (Unix seconds), or None without any."""
        within = [value for at, value in self.samples if span[0] <= at <= span[1]]
        return sum(within) / len(within) if within else None


def train(run: Run, out: Path, gpu: bool, check: bool = True) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "training", "train", "--no-export", "--checkpoint-every", "1000000",
               "--checkpoint-minutes", "0",
               "--output-dir", str(out / run.name), *run.flags]
    print(f"benchmark: {run.label.replace('{settings}', 'defaults')}: {' '.join(command[3:])}", flush=True)
    with UtilisationSampler(gpu) as sampler:
        result = subprocess.run(command, capture_output=True, text=True)
    if result.returncode != 0:
        if not check:
            return result
        raise SystemExit(f"error: benchmark run {run.label!r} failed:\n{result.stderr[-2000:]}")
    run.summary = json.loads((out / run.name / "summary.json").read_text())
    run.windows, span = counted_windows((out / run.name / "metrics.jsonl").read_text(), run.skip_steps)
    run.gpu_utilisation = sampler.mean(span) if span else None
    return result


def counted_windows(metrics_jsonl: str, skip_steps: int) -> tuple[list[tuple[int, float]], tuple[float, float] | None]:
    """(steps, img/s) of each logged window (metrics.jsonl: one line per logged step, the rate since the
    previous one) that starts at or after `skip_steps`, and the span of time they cover (Unix seconds; None when
    the first window counts, whose start is not logged)."""
    rates, start, started_at, ended_at = [], 0, None, None
    for line in metrics_jsonl.splitlines():
        record = json.loads(line)
        if "img_per_sec" not in record:  # a validation's record (val_loss, val_top1): no window
            continue
        if start >= skip_steps:
            rates.append((record["step"] - start, record["img_per_sec"]))
            ended_at = record["time"]
        elif record["step"] >= skip_steps:
            started_at = record["time"]  # the last window left out ends where the counted ones start
        start = record["step"]
    if not rates:
        raise SystemExit(f"error: no logged window starts at or after step {skip_steps}; give more --steps")
    return rates, (started_at, ended_at) if started_at is not None else None


def read_ahead(workers: int) -> int:
    """Batches a folder loader can have ready before the model asks: DataLoader's default prefetch_factor, 2 per
    worker, plus the nvjpeg loader's PREFETCH_DEPTH (2) and the one its producer holds while it waits. They fill
    up during the first steps' compilation, and a rate counted over them would be the model's, not the loader's."""
    return 2 * workers + 3


def jpeg_span(log_every: int, steps: int, workers: int, compiled: bool) -> tuple[int, int]:
    """(steps left out, steps in all) of a JPEG run. While the first steps compile (torch.compile, XLA: a minute on
    a GPU) the loader fills its read-ahead of B batches, and while the model drains it the loader refills it, so
    emptying it takes B x m / (m - l) steps (m the model's rate, l the loader's): 3B covers a loader at up to 2/3
    of the model's rate (a faster one is near the model's rate anyway), and at least 2B steps are counted after
    that, several rounds of the workers' bursts (each worker finishes a whole batch at once). Without compilation
    the first window, left out, is about as long as the others, and B is all the start-up fills."""
    ahead = read_ahead(workers)
    drain, least = (3 * ahead, 2 * ahead) if compiled else (ahead, 0)
    skip = log_every * -(-(log_every + drain) // log_every)  # whole logged windows
    return skip, skip + max(steps - log_every, least)


def largest_batch(common: list[str], out: Path) -> int:
    """The largest of PROBE_BATCHES that trains a few eager steps (ours without its compiler) without running out
    of GPU memory."""
    fits = None
    for batch in PROBE_BATCHES:
        probe = Run(f"probe-{batch}", f"probe batch {batch}",
                    [*common, "--steps", "3", "--log-every", "1", "--batch-size", str(batch)])
        result = train(probe, out, gpu=False, check=False)
        if result.returncode != 0:
            if "out of memory" not in (result.stderr + result.stdout).lower():
                raise SystemExit(f"error: batch-size probe {batch} failed:\n{result.stderr[-2000:]}")
            break
        fits = batch
    if fits is None:
        raise SystemExit(f"error: not even batch {PROBE_BATCHES[0]} fits on this GPU; give --batch-size")
    print(f"benchmark: the largest batch that fits: {fits}", flush=True)
    return fits


def loader_rate(data: Path, loader: str, image_size: int, batch_size: int, workers: int, batches: int) -> float:
    """Images per second `--loader LOADER` delivers to the device with no model behind it (runs in its own
    process: DALI's workers and the GPU context start fresh)."""
    import torch

    from training.config import TrainConfig, resolve_for_device
    from training.pytorch.data import FolderData

    gpu = torch.cuda.is_available()
    device = torch.device("cuda", 0) if gpu else torch.device("cpu")
    cfg = resolve_for_device(TrainConfig(data=str(data), image_size=image_size, batch_size=batch_size,
                                         workers=workers, loader=loader), gpu)
    source = FolderData(data, cfg, rank=0, size=1, device=device)
    stream = source.epoch_batches(0, 0)
    for _ in range(read_ahead(workers)):  # start-up, and the batches read ahead meanwhile, are not throughput
        next(stream)
    started, done = time.perf_counter(), 0
    for images, _ in stream:
        images.to(device, non_blocking=True)
        done += 1
        if done == batches:
            break
    if gpu:
        torch.cuda.synchronize()
    return done * batch_size / (time.perf_counter() - started)


def measure_loader(data: Path, loader: str, image_size: int, batch_size: int, workers: int, batches: int) -> float:
    code = ("import sys; from pathlib import Path; from devtools.benchmark import loader_rate; "
            "print(loader_rate(Path(sys.argv[1]), sys.argv[2], *map(int, sys.argv[3:])))")
    print(f"benchmark: {loader} data path alone, {batches} batches of {batch_size}", flush=True)
    result = subprocess.run([sys.executable, "-c", code, str(data), loader, str(image_size), str(batch_size),
                             str(workers), str(batches)], capture_output=True, text=True)
    if result.returncode != 0:
        raise SystemExit(f"error: the {loader} data path failed:\n{result.stderr[-2000:]}")
    return float(result.stdout.strip().splitlines()[-1])


def jpeg_loaders(framework: str) -> tuple[str, ...]:
    """The framework's --loader values this machine runs, in the table's order: DALI only where it is installed."""
    from training.config import dali_installed

    return tuple(loader for loader in frameworks.get(framework).loaders if loader != "dali" or dali_installed())


def chosen_loaders(asked: str | None, framework: str) -> tuple[str, ...]:
    """--loaders: the JPEG loaders to measure, in the table's order; by default every one this machine runs. None
    for a framework with a folder reader of its own (tf.data): its one JPEG run reads with that."""
    reader = frameworks.get(framework).folder_reader
    if asked is None:
        return () if reader else jpeg_loaders(framework)
    if reader:
        raise UsageError(f"--loaders applies to {frameworks.which(lambda f: not f.folder_reader)} only; {framework} "
                         f"reads JPEG files with {reader}")
    available = jpeg_loaders(framework)
    names = [name.strip() for name in asked.split(",")]
    unknown = [name for name in names if name not in available]
    if unknown:
        raise UsageError(f"--loaders {asked}: give some of {','.join(available)} (the loaders this machine runs)")
    return tuple(name for name in available if name in names)


def jpeg_dataset(images: int, out: Path, jobs: int) -> Path:
    from devtools.synth_data import make_dataset

    classes = 100
    per_class = -(-images // classes)
    print(f"benchmark: writing {classes * per_class} JPEG files at ImageNet sizes to {out} ...", flush=True)
    count, size = make_dataset(out, classes, per_class, 0, imagenet_sizes=True, jobs=jobs)
    print(f"benchmark: {count} files, {size / count / 1024:.0f} KB each on average", flush=True)
    return out


def _table(runs: list[Run], loaders: dict[str, float], baseline: Run, synthetic: Run) -> list[str]:
    lines = [f"  {'run':<58} {'img/s':>9} {'95% CI':>8} {'peak memory':>16} {'GPU util':>9} {'x recipe':>9} "
             f"{'x synthetic':>12}"]
    for run in runs:
        s = run.summary
        memory = f"{s['peak_memory_mb'] / 1024:.1f} GiB {'GPU' if s['peak_memory_of'] == 'gpu' else 'RSS'}"
        util = "n/a" if run.gpu_utilisation is None else f"{run.gpu_utilisation:.0f}%"
        lines.append(f"  {run.title:<58} {run.rate:>9.1f} {'+-' + format(run.ci95, '.1f'):>8} "
                     f"{memory:>16} {util:>9} {run.rate / baseline.rate:>8.2f}x {run.rate / synthetic.rate:>11.2f}x")
    for loader, rate in loaders.items():
        lines.append(f"  {loader + ' data path alone (no model)':<58} {rate:>9.1f} {'':>8} {'':>16} {'':>9} "
                     f"{'':>9} {rate / synthetic.rate:>11.2f}x")
    return lines


def main(argv: list[str]) -> int:
    gpu = gpu_name()
    parser = argparse.ArgumentParser(prog="python -m devtools benchmark", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--framework", choices=frameworks.names(), default=frameworks.names()[0],
                        help=f"training loop to measure (default: {frameworks.names()[0]}); run from that "
                        "framework's environment")
    parser.add_argument("--image-size", type=int, default=224 if gpu else 64, help="pixels (default: 224 GPU, 64 CPU)")
    parser.add_argument("--steps", type=int, default=60 if gpu else 12, help="steps per run, the first "
                        "logged window (warm-up, compilation) excluded from the rate (default: 60 GPU, 12 CPU)")
    parser.add_argument("--batch-size", default="auto", help="our per-worker batch, or auto: the largest of "
                        f"{', '.join(map(str, PROBE_BATCHES))} that fits on the GPU, 64 on CPU (default: auto); "
                        "the recipe always uses 32")
    parser.add_argument("--workers", type=int, default=None, help="loader worker processes for the JPEG runs "
                        "(default: the cores, at most 16)")
    parser.add_argument("--data", type=Path, help="an ImageNet-layout folder for the JPEG runs (default: made now "
                        "at ImageNet sizes, one epoch's worth, in a temporary folder)")
    parser.add_argument("--skip-jpeg", action="store_true", help="synthetic runs only")
    parser.add_argument("--loaders", help="pytorch: the JPEG loaders to measure, comma-separated, e.g. pil "
                        "(default: every one this machine runs: dali where installed, nvjpeg, pil)")
    parser.add_argument("--no-compile", action="store_true", help="leave torch.compile / XLA out of our settings")
    parser.add_argument("--dist", choices=("auto", "horovod", "ddp"), default="auto", help="pytorch's "
                        "distribution, one process without a launcher; auto: ddp where torch.compile runs (train "
                        "refuses --compile with horovod), else horovod where it is installed, else ddp (under Horovod the weights stay NCHW and only activations go "
                        "channels-last, DDP takes channels-last weights)")
    args = parser.parse_args(argv)
    fw = frameworks.get(args.framework)
    # ours: the trainer's own defaults for the device, plus its compiler (none: fw.no_compiler says why)
    compiles = fw.compiler and not args.no_compile and (gpu or fw.compiler not in GPU_ONLY_COMPILERS)
    args.dist = distribution(args.dist, args.framework, horovod_installed(args.framework),
                             compiling=bool(compiles) and fw.compiler == "compile")
    loaders_asked = chosen_loaders(args.loaders, args.framework)
    try:
        __import__(fw.image.package)
    except ImportError:
        raise UsageError(f"--framework {args.framework}: not installed in this Python; run {fw.image.venv}/bin/python "
                         "-m devtools benchmark") from None
    if args.batch_size != "auto" and not args.batch_size.isdigit():
        raise UsageError(f"--batch-size {args.batch_size}: give a number of images or auto")
    ran_with = versions(args.framework, gpu)
    print(f"benchmark: {ran_with}", flush=True)
    # A framework with DDP beside Horovod runs whichever this machine has (`distribution`): its runs and title say
    # which; one with Horovod alone runs it by default.
    names_dist = "ddp" in fw.dist
    workers = args.workers or min(16, len(os.sched_getaffinity(0)))
    log_every = max(1, args.steps // 6)
    common = ["--framework", args.framework, "--image-size", str(args.image_size), "--log-every", str(log_every),
              *(["--dist", args.dist] if names_dist else [])]
    # the recipe: fp32, and NCHW where --channels-last applies (as Horovod's PyTorch recipe trains)
    recipe_flags = ["--precision", "fp32", *(["--no-channels-last"] if fw.channels_last else [])]
    ours = [f"--{fw.compiler}"] if compiles else []
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp)
        if args.batch_size == "auto":
            batch = largest_batch([*common, "--data", "synthetic"], out) if gpu else 64
        else:
            batch = int(args.batch_size)
        steps = ["--steps", str(args.steps)]
        recipe = Run("recipe", f"recipe: synthetic, fp32, {fw.uncompiled}, batch 32",
                     [*common, *steps, "--data", "synthetic", "--batch-size", "32", *recipe_flags], log_every)
        synthetic = Run("ours", f"ours: synthetic, {{settings}}, batch {batch}",
                        [*common, *steps, "--data", "synthetic", "--batch-size", str(batch), *ours], log_every)
        runs, loaders = [recipe, synthetic], {}
        if "native" in fw.dist:
            # Beside Horovod: the same synthetic run under MultiWorkerMirroredStrategy (one worker, no TF_CONFIG),
            # so what leaving Horovod costs is a measured figure.
            runs.append(Run("native", f"ours, --dist native: synthetic, {{settings}}, batch {batch}",
                            [*common, *steps, "--data", "synthetic", "--batch-size", str(batch), *ours,
                             "--dist", "native"], log_every))
        if not args.skip_jpeg:
            # The JPEG runs count only the steps after their loader's read-ahead has drained (`jpeg_span`); one
            # epoch of files covers the run and the data path's own measurement.
            skip, jpeg_steps = jpeg_span(log_every, args.steps, workers, compiled=bool(ours))
            loader_batches = 2 * read_ahead(workers)  # the data path alone: after its read-ahead, as many again
            data = args.data or jpeg_dataset((max(jpeg_steps, read_ahead(workers) + loader_batches) + 1) * batch,
                                             out / "jpeg", workers)
            jpeg = [*common, "--steps", str(jpeg_steps), "--data", str(data), "--batch-size", str(batch),
                    "--workers", str(workers), *ours]
            # A folder reader of its own (tf.data) reads once; else each loader asked for (--loader) runs.
            for loader in (fw.folder_reader,) if fw.folder_reader else loaders_asked:
                flags = jpeg if fw.folder_reader else [*jpeg, "--loader", loader]
                runs.append(Run(f"jpeg-{loader}", f"ours: JPEG files, {loader} ({workers} workers)", flags, skip))
        for run in runs:
            train(run, out, bool(gpu))
        if not args.skip_jpeg and not fw.folder_reader:  # each --loader's data path alone, without a model
            loaders = {loader: measure_loader(data, loader, args.image_size, batch, workers, loader_batches)
                       for loader in loaders_asked}
    device = gpu or f"CPU ({len(os.sched_getaffinity(0))} cores)"
    framework = f"{args.framework} ({args.dist})" if names_dist else args.framework
    print(f"\nResNet50 training, {framework}, {args.image_size}x{args.image_size}, 1 worker, {device}")
    print(f"  ran with: {ran_with}")
    print("\n".join(_table(runs, loaders, recipe, synthetic)))
    print(f"  ours / recipe (synthetic): {synthetic.rate / recipe.rate:.2f}x")
    return 0
