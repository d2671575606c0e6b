"""Training configuration: defaults here, an optional YAML file over them, flags over both.

One dataclass for every framework; each field's help text is its `--help` line. Validation that needs no
framework happens here, so a bad value fails in a second, before any model is built.
"""
from __future__ import annotations

import argparse
import importlib.util
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from collections.abc import Callable
from typing import Any

import yaml

from training import frameworks
from training.errors import UsageError

DIST_BACKENDS = ("horovod", "ddp", "native")
PRECISIONS = ("auto", "fp32", "bf16", "fp16")
SCHEDULES = ("auto", "cosine", "step", "poly")
OPTIMIZERS = ("auto", "sgd", "lars")
# --optimizer auto: LARS past this global batch. Plain SGD with the linear LR rule keeps ResNet50's accuracy up to
# a global batch of 8k (Goyal et al. 2017, arXiv 1706.02677, "Accurate, Large Minibatch SGD": 8,192 images, and
# worse beyond); past it, LARS (You, Gitman, Ginsburg 2017, arXiv 1708.03888: ResNet50 to 32k) is what MLPerf's
# ResNet reference (mlcommons/training image_classification, `--optimizer=LARS`) and its submissions train with.
LARS_ABOVE_GLOBAL_BATCH = 8192
LOADERS = ("auto", "dali", "nvjpeg", "pil")
# torch.compile's modes (https://docs.pytorch.org/docs/stable/generated/torch.compile.html): reduce-overhead
# replays the compiled kernels as CUDA graphs; max-autotune-no-cudagraphs autotunes kernels (long compiles).
COMPILE_MODES = ("default", "reduce-overhead", "max-autotune-no-cudagraphs")
# Without a GPU, the flags sized for one take these values unless given (resolve_for_device). Measured on 2 shared
# cores (README's local quickstart): ResNet50 at 224 px and batch 32 ran at 0.5 img/s, 10 minutes for 5 epochs of
# 90 images; at 64 px and batch 16 about 10 img/s, so a small folder's 10 epochs take minutes. One loader process:
# decoding small JPEGs is cheap, and each process takes a core from the model's threads.
CPU_SIZED = {"image_size": 64, "batch_size": 16, "epochs": 10.0, "workers": 1}


def _opt(default: Any, help: str, choices: tuple[str, ...] | Callable[[], tuple[str, ...]] | None = None):
    # choices: a tuple, or a function that reads it when the parser is built (the frameworks table)
    return field(default=default, metadata={"help": help, "choices": choices})


@dataclass(kw_only=True)
class TrainConfig:
    # What and where
    framework: str = _opt(frameworks.names()[0], "framework and its training loop (training/frameworks.py)",
                          frameworks.names)
    dist: str = _opt("horovod", "distribution: horovod (launch with horovodrun), ddp (launch with torchrun; "
                                "pytorch only) or native (tf.distribute.MultiWorkerMirroredStrategy: one process "
                                "per node driving all its GPUs, the cluster in TF_CONFIG; tensorflow and keras "
                                "only)", DIST_BACKENDS)
    data: str = _opt("synthetic", "'synthetic' (random tensors made on the device, like Horovod's benchmark) or "
                                  "an ImageNet-layout folder: train/<class>/*.JPEG, optional val/<class>/*.JPEG")
    output_dir: str = _opt("out", "metrics.jsonl, summary.json, TensorBoard events, checkpoints/, model export")
    # Model and data
    num_classes: int = _opt(0, "classes of the ResNet50 head; 0 (auto): the number of class folders in the "
                               "folder's train/ (a given value must equal it), or ImageNet's 1000 with synthetic data")
    init_from: str = _opt("", "start from these weights (pytorch): a torchvision ResNet50 state_dict file (such as "
                              "resnet50-11ad3fa6.pth) or one of our checkpoints (.pt); the last layer (fc) is "
                              "replaced, freshly initialised, when its classes differ from the run's (fine-tuning). "
                              "--resume wins over it")
    pretrained: bool = _opt(False, "start from torchvision's ImageNet weights (IMAGENET1K_V2), fetched from "
                                   "download.pytorch.org into TORCH_HOME on nodes with internet egress (or found "
                                   "there), the last layer replaced as with --init-from (pytorch)")
    image_size: int = _opt(224, "training crop size in pixels")
    batch_size: int = _opt(32, "images per worker per step; the global batch is this x world size")
    workers: int = _opt(4, "data-loading processes per worker (folder data)")
    loader: str = _opt("auto", "folder-data decoding and augmentation (pytorch): dali (NVIDIA DALI: on the GPU with "
                               "nvJPEG, on CPU with its CPU backend), nvjpeg (torchvision's batched decode_jpeg: on "
                               "the GPU with nvJPEG, files read by --workers processes; on CPU with libjpeg-turbo), pil "
                               "(torchvision in --workers processes); auto: on a GPU dali where DALI is installed, "
                               "else nvjpeg; on CPU pil. All crop and order alike", LOADERS)
    max_bad_images: float = _opt(0.01, "fraction of unreadable images tolerated before training refuses to start")
    # Optimisation (Goyal et al. 2017; LARS: You et al. 2017 as MLPerf's ResNet reference runs it)
    optimizer: str = _opt("auto", "sgd (momentum) or lars (layer-wise adaptive rate scaling: each weight tensor's "
                                  "step scaled by its trust ratio; biases and batch-norm parameters neither scaled nor "
                                  "decayed; pytorch only); auto: lars when the global batch is over "
                                  f"{LARS_ABOVE_GLOBAL_BATCH} (pytorch), else sgd", OPTIMIZERS)
    base_lr: float = _opt(0.1, "learning rate per 256 images with sgd; the peak LR is base_lr x global batch / 256 "
                               "(with lars, the warmup's starting LR)")
    lars_lr: float = _opt(0.0, "peak LR with lars, which scales it per layer rather than with the batch (0: MLPerf's "
                               "reference value for the global batch: 10 below 16384, 25 below 32768, 31.2 above)")
    warmup_steps: int = _opt(-1, "linear warmup steps from base_lr to the peak (-1: 5%% of the run with sgd, 12%% "
                                 "with lars, as MLPerf's 5 of about 41 epochs)")
    lr_schedule: str = _opt("auto", "decay after warmup: cosine; step (/10 at 30, 60 and 80%% of the run); poly "
                                    "(MLPerf's LARS schedule: (1 - progress)^2 down to 1e-4); auto: poly with lars, "
                                    "cosine with sgd", SCHEDULES)
    momentum: float = _opt(0.9, "momentum (sgd and lars)")
    weight_decay: float = _opt(1e-4, "L2 weight decay (with lars: not on biases and batch-norm parameters)")
    label_smoothing: float = _opt(0.1, "label smoothing of the cross-entropy loss")
    # Speed
    # Defaults fit the hardware: what is fastest on a GPU (bf16 on tensor cores, NHWC convolutions) there, fp32
    # in NCHW on CPU (see resolve_for_device).
    precision: str = _opt("auto", "compute precision (autocast; fp16 adds loss scaling); auto: bf16 on a GPU that "
                                  "has it (A100, H100: compute capability 8.0+), fp16 on older GPUs (V100, T4), fp32 "
                                  "on CPU", PRECISIONS)
    channels_last: bool | None = _opt(None, "NHWC memory format for pytorch (faster convolutions on tensor "
                                            "cores); default: on for pytorch on a GPU, off on CPU")
    compile: bool = _opt(False, "torch.compile the model (pytorch, with --dist ddp: DDP splits the compiled graph at "
                                "its gradient buckets, so the all-reduce still overlaps backward; Horovod's hooks "
                                "would wait for the whole compiled backward, so --dist horovod runs eager)")
    compile_mode: str = _opt("default", "torch.compile's mode with --compile: default; reduce-overhead (CUDA "
                                        "graphs: each step's kernels replayed as graphs, fewer launches, more "
                                        "memory); max-autotune-no-cudagraphs (autotuned kernels, minutes more to "
                                        "compile)", COMPILE_MODES)
    xla: bool = _opt(False, "XLA-compile the forward and backward pass (tensorflow)")
    fp16_allreduce: bool = _opt(False, "compress gradients to fp16 for the allreduce (horovod)")
    expected_img_per_sec: float = _opt(0.0, "img/s per GPU this node size should reach at 224 px, from its benchmark "
                                            "(the job builders pass the catalog's figure; 0: unknown): progress lines "
                                            "and summary.json give the run's share of it (training/efficiency.py)")
    # Before training (multi-node jobs add these: training/interconnect.py)
    interconnect_check: bool = _opt(False, "measure the all-reduce bus bandwidth over this run's ranks before "
                                           "training, in these same processes, and write it to "
                                           "OUTPUT_DIR/interconnect.json (horovod and ddp)")
    interconnect_floor_gbps: float = _opt(0.0, "with --interconnect-check: below this bus bandwidth (GB/s) the run "
                                               "stops before training (0: no floor, the figure only)")
    allow_slow_interconnect: bool = _opt(False, "below --interconnect-floor-gbps, warn and train anyway")
    # Length and cadence
    epochs: float = _opt(1.0, "passes over the training data (ignored when --steps is set)")
    steps: int = _opt(0, "optimizer steps to run in total (0: use --epochs)")
    log_every: int = _opt(10, "steps between metrics.jsonl records and progress lines")
    progress_seconds: float = _opt(30.0, "also a progress line (step, img/s, elapsed, ETA) whenever this many "
                                         "seconds passed without one, during long steps, start-up and validation "
                                         "too; on a terminal a progress bar redrawn every second instead "
                                         "(training/progress.py)")
    val_every: int = _opt(1, "epochs between validations (val loss and top-1 over val/), and one at the end; 0: at "
                             "the end only; left out, stretched to whole multiples while a validation would take "
                             "over 10 percent of the training time (training/validation.py)")
    checkpoint_every: int = _opt(500, "steps between checkpoints (one is always written at the end)")
    checkpoint_minutes: float = _opt(30.0, "also checkpoint once this many minutes of training have passed since "
                                           "the last one (0: by steps only): bounds what a Spot eviction or a lost "
                                           "node costs, whatever a step takes")
    keep_checkpoints: int = _opt(3, "checkpoints kept; older ones are deleted")
    stop_at_step: int = _opt(0, "end this run at this step with a checkpoint, as a preemption would (0: run to "
                                "the end); a later --resume auto continues the same LR schedule")
    resume: str = _opt("none", "'auto' continues from the newest valid checkpoint in output_dir, or a checkpoint path")
    seed: int = _opt(42, "seed of weights, synthetic data and augmentation")
    export: bool = _opt(True, "export the final model (ONNX for pytorch) from rank 0")
    mlflow: bool = _opt(False, "also log params and metrics to MLflow from rank 0: to MLFLOW_TRACKING_URI when set "
                               "(Azure ML sets it in every job, which logs there even without this flag), else to a "
                               "local store in OUTPUT_DIR/mlruns (view it with `mlflow ui`: README's local quickstart says the install)")

    # Which of CPU_SIZED the user gave (flags or --config): the others take CPU-sized values on a machine without a
    # GPU (resolve_for_device). None (a TrainConfig built in code): all given, nothing resized. Not a flag.
    given: tuple[str, ...] | None = field(default=None, metadata={"internal": True})

    def validate(self) -> None:
        positive = ("image_size", "batch_size", "log_every", "checkpoint_every", "keep_checkpoints",
                    "progress_seconds")
        for name in positive:
            if getattr(self, name) <= 0:
                raise UsageError(f"--{name.replace('_', '-')} must be positive, got {getattr(self, name)}")
        if self.num_classes < 0:
            raise UsageError(f"--num-classes must be >= 0 (0: from the data), got {self.num_classes}")
        if self.init_from and self.pretrained:
            raise UsageError("--init-from and --pretrained both name the starting weights; give one")
        if self.image_size < 32:
            raise UsageError(f"--image-size {self.image_size} is too small for ResNet50; use 32 or more")
        if self.steps < 0 or self.epochs <= 0 or self.stop_at_step < 0:
            raise UsageError("--steps and --stop-at-step must be >= 0, --epochs > 0")
        if self.checkpoint_minutes < 0:
            raise UsageError(f"--checkpoint-minutes must be >= 0 (0: by steps only), got {self.checkpoint_minutes}")
        if self.expected_img_per_sec < 0:
            raise UsageError(f"--expected-img-per-sec must be >= 0 (0: unknown), got {self.expected_img_per_sec}")
        if self.interconnect_floor_gbps < 0:
            raise UsageError(f"--interconnect-floor-gbps must be >= 0 (0: no floor), got {self.interconnect_floor_gbps}")
        if self.interconnect_check and self.dist == "native":
            raise UsageError("--interconnect-check measures horovod and ddp runs; --dist native's collectives are "
                             "not measured yet (leave the flag out)")
        if self.val_every < 0:
            raise UsageError(f"--val-every must be >= 0 (0: at the end only), got {self.val_every}")
        if self.workers < 0:
            raise UsageError(f"--workers must be >= 0, got {self.workers}")
        if not 0 <= self.max_bad_images < 1:
            raise UsageError(f"--max-bad-images must be a fraction in [0, 1), got {self.max_bad_images}")
        if self.base_lr <= 0:
            raise UsageError(f"--base-lr must be positive, got {self.base_lr}")
        if self.lars_lr < 0:
            raise UsageError(f"--lars-lr must be positive (or 0: MLPerf's value), got {self.lars_lr}")
        # What a framework cannot do comes from its row in training/frameworks.py; each refusal names the
        # frameworks that can.
        fw, which = frameworks.get(self.framework), frameworks.which
        if self.optimizer not in ("auto", *fw.optimizers):
            raise UsageError(f"--optimizer {self.optimizer} applies to {which(lambda f: self.optimizer in f.optimizers)}"
                             f" only ({self.framework} trains with {'/'.join(fw.optimizers)})")
        if self.lars_lr and self.optimizer == "sgd":
            raise UsageError("--lars-lr applies to --optimizer lars (sgd's peak LR comes from --base-lr)")
        if self.dist not in fw.dist:
            raise UsageError(f"--dist {self.dist} applies to {which(lambda f: self.dist in f.dist)} only; "
                             f"--framework {self.framework} takes --dist {'|'.join(fw.dist)}")
        if self.compile and fw.compiler != "compile":
            others = ", ".join(f"{f.name} has --{f.compiler}" for f in frameworks.FRAMEWORKS.values()
                               if f.compiler not in ("", "compile"))
            raise UsageError(f"--compile applies to {which(lambda f: f.compiler == 'compile')} only ({others})")
        if self.compile and self.dist == "horovod":
            # https://docs.pytorch.org/docs/stable/torch.compiler_faq.html#do-you-support-distributed-code; measured:
            # python -m devtools overlap-benchmark (docs/training.md, "Compiled runs and the gradient exchange")
            raise UsageError("--compile with --dist horovod would exchange gradients only after the whole compiled "
                             "backward (Horovod's hooks fire then); use --dist ddp --compile, or leave --compile out")
        if self.compile_mode != "default" and not self.compile:
            raise UsageError(f"--compile-mode {self.compile_mode} applies with --compile; add --compile")
        if self.xla and fw.compiler != "xla":
            raise UsageError(f"--xla applies to --framework {which(lambda f: f.compiler == 'xla')} only "
                             f"({self.framework}: {f'use --{fw.compiler}' if fw.compiler else fw.no_compiler})")
        if self.loader not in ("auto", *fw.loaders):
            raise UsageError(f"--loader {self.loader} applies to {which(lambda f: self.loader in f.loaders)} only "
                             f"({self.framework} reads folders with {fw.folder_reader})")
        if (self.init_from or self.pretrained) and not fw.starting_weights:
            raise UsageError(f"--{'init-from' if self.init_from else 'pretrained'} applies to "
                             f"{which(lambda f: f.starting_weights)} only ({self.framework} starts from random weights)")
        if self.channels_last is True and not fw.channels_last:
            raise UsageError(f"--channels-last applies to {which(lambda f: f.channels_last)} only ({self.framework} "
                             "is channels-last already)")


def dali_installed() -> bool:
    # Found, not imported: this module stays light. find_spec imports the parent package, and raises rather than
    # answering None when no `nvidia` package exists at all.
    try:
        return importlib.util.find_spec("nvidia.dali") is not None
    except ModuleNotFoundError:
        return False


def auto_precision(gpu: bool, bf16: bool) -> str:
    """--precision auto: bf16 where the GPU computes in it, fp16 (with loss scaling) on GPUs without bf16 units,
    fp32 on CPU. bf16 needs compute capability 8.0 (Ampere) or later: a T4 (7.5) or V100 (7.0) has fp16 tensor cores
    only and runs bf16 emulated, slower than fp32 (https://docs.nvidia.com/cuda/cuda-c-programming-guide/ "Arithmetic
    Instructions", bf16 from compute capability 8.0; training/pytorch/distributed.py and
    training/tensorflow/device.py read the capability)."""
    return ("bf16" if bf16 else "fp16") if gpu else "fp32"


def resolve_for_device(cfg: TrainConfig, gpu: bool, bf16: bool | None = None) -> TrainConfig:
    """`cfg` with the hardware-dependent defaults (precision and loader auto, channels-last unset) decided for
    this device; `bf16`: whether the GPU has bf16 units (default: as `gpu`)."""
    fw = frameworks.get(cfg.framework)
    bf16 = gpu if bf16 is None else bf16
    precision = auto_precision(gpu, bf16) if cfg.precision == "auto" else cfg.precision
    channels_last = (gpu and fw.channels_last) if cfg.channels_last is None else cfg.channels_last
    if cfg.loader == "auto":
        # nvjpeg needs only torchvision, which every pytorch environment has (the model is torchvision's)
        loader = ("dali" if dali_installed() else "nvjpeg") if gpu and "nvjpeg" in fw.loaders else "pil"
    else:
        loader = cfg.loader
    return replace(cfg, precision=precision, channels_last=channels_last, loader=loader,
                   **({} if gpu else {name: CPU_SIZED[name] for name in cpu_sized(cfg)}))


def cpu_sized(cfg: TrainConfig) -> list[str]:
    """The GPU-sized settings `cfg` leaves to their defaults, which a machine without a GPU replaces by CPU_SIZED's."""
    if cfg.given is None:
        return []
    return [name for name in CPU_SIZED if name not in cfg.given and not (name == "epochs" and cfg.steps)]


def cpu_sized_text(cfg: TrainConfig) -> str:
    """The CPU-sized values in effect, for the run's first line, or ""."""
    names = cpu_sized(cfg)
    if not names:
        return ""
    shown = ", ".join(f"{_flag(name)} {getattr(cfg, name):g}" for name in names)
    return f"no GPU, so CPU-sized defaults: {shown} (give the flag to change one)"


def resolve_optimizer(cfg: TrainConfig, global_batch: int) -> TrainConfig:
    """`cfg` with the batch-dependent defaults (optimizer and LR schedule auto) decided for this global batch.
    The same answer wherever it is asked (the training loop building its optimizer, the runner's LR plan)."""
    optimizer = cfg.optimizer
    if optimizer == "auto":
        lars = "lars" in frameworks.get(cfg.framework).optimizers
        optimizer = "lars" if lars and global_batch > LARS_ABOVE_GLOBAL_BATCH else "sgd"
    schedule = cfg.lr_schedule if cfg.lr_schedule != "auto" else "poly" if optimizer == "lars" else "cosine"
    return replace(cfg, optimizer=optimizer, lr_schedule=schedule)


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # one line, not the whole usage block
        self.exit(2, f"error: {message} (see `python -m training {self.prog.split()[-1]} --help`)\n")


class _CheckingParser(_Parser):
    def error(self, message: str):  # for check_args: the caller words the one line
        raise UsageError(message)


def build_parser(prog: str = "python -m training train", description: str = "",
                 parser_class: type[argparse.ArgumentParser] = _Parser) -> argparse.ArgumentParser:
    parser = parser_class(prog=prog, description=description, formatter_class=argparse.RawDescriptionHelpFormatter,
                          add_help=parser_class is _Parser)
    parser.add_argument("--config", type=Path, help="YAML file of defaults (keys: the flag names with _ or -); "
                                                    "flags given on the command line win")
    for f in fields(TrainConfig):
        if f.metadata.get("internal"):
            continue
        help_text = f.metadata["help"] + ("" if f.default is None else f" (default: {f.default})")
        if f.type in ("bool", "bool | None"):
            parser.add_argument(_flag(f.name), action=argparse.BooleanOptionalAction, default=f.default, help=help_text)
        else:
            kind = {"int": int, "float": float, "str": str}[f.type]
            choices = f.metadata["choices"]
            parser.add_argument(_flag(f.name), type=kind, default=f.default,
                                choices=choices() if callable(choices) else choices, help=help_text)
    return parser


def _from_yaml(path: Path) -> dict[str, Any]:
    try:
        loaded = yaml.safe_load(path.read_text()) or {}
    except OSError as err:
        raise UsageError(f"--config {path}: {err.strerror}") from None
    except yaml.YAMLError as err:
        raise UsageError(f"--config {path}: not valid YAML ({str(err).splitlines()[0]})") from None
    if not isinstance(loaded, dict):
        raise UsageError(f"--config {path}: expected a mapping of option: value")
    names = {f.name for f in fields(TrainConfig)}
    values = {str(k).replace("-", "_"): v for k, v in loaded.items()}
    unknown = sorted(set(values) - names)
    if unknown:
        raise UsageError(f"--config {path}: unknown option {unknown[0]!r}")
    return values


def parse_args(argv: list[str], description: str = "") -> TrainConfig:
    parser = build_parser(description=description)
    known, _ = parser.parse_known_args(argv)
    if known.config:
        defaults = _from_yaml(known.config)
        parser.set_defaults(**defaults)
        # YAML values go through the same type and choice checks as flags.
        for action in parser._actions:
            if action.dest in defaults and action.choices and defaults[action.dest] not in action.choices:
                raise UsageError(f"--config {known.config}: {action.dest} must be one of {', '.join(action.choices)}")
    args = vars(parser.parse_args(argv))
    args.pop("config")
    given = set(defaults) if known.config else set()
    cfg = TrainConfig(**args, given=tuple(sorted(given | _given_flags(argv))))
    cfg.validate()
    return cfg


def _given_flags(argv: list[str]) -> set[str]:
    """The options `argv` names (their dest), whatever their values."""
    parser = build_parser(parser_class=_CheckingParser)
    for action in parser._actions:
        action.default = argparse.SUPPRESS
    try:
        return set(vars(parser.parse_known_args(argv)[0]))
    except UsageError:
        return set()  # the real parser has reported it by now


def check_args(argv: list[str]) -> None:
    """Raise UsageError if `python -m training train ARGV` would refuse ARGV: the same parser and validation,
    without reading a --config file (it lives where the job runs). For the deployer's `plan` and `submit`."""
    args = vars(build_parser(parser_class=_CheckingParser).parse_args(argv))
    args.pop("config")
    TrainConfig(**args).validate()


def as_dict(cfg: TrainConfig) -> dict[str, Any]:
    return asdict(cfg)
