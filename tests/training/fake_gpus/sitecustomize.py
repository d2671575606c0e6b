"""The GPU-shaped harness: with FAKE_GPUS=N in its environment, every Python process the tests start (ranks under
horovodrun, torchrun or a launcher stand-in) is told by its framework that its node has N GPUs, and records the calls
that bind it to one, as JSON lines in FAKE_GPU_RECORD/<pid>.jsonl. Python imports this module at start-up because the
tests put this folder first on PYTHONPATH (https://docs.python.org/3/library/site.html, "sitecustomize"); without
FAKE_GPUS it does nothing.

What is faked is the framework's own device API, nothing of ours:
- PyTorch: torch.cuda.device_count() says N and torch.cuda.set_device(i) is recorded. A CPU cannot run a CUDA tensor,
  so each process ends (exit 0) right after it binds: the test sees where every entry point binds, under every
  launcher, before its first collective.
- TensorFlow: tf.config.list_physical_devices("GPU") lists N GPUs of compute capability FAKE_GPU_CC (default 9.0, an
  H100); set_visible_devices / set_memory_growth are recorded, get_visible_devices answers the bound one. TensorFlow's
  own placement still sees only the CPU, so the rank trains on CPU with every GPU default (bf16, export on).
- FAKE_MPI_RANKS=1: Open MPI's rule that MPI_Init runs once per rank, even from two processes (open-mpi/ompi issue
  7025): a second hvd.init() from a process of the same rank (HOROVOD_RANK, as the launcher set it) ends that process
  with Open MPI's message, as mpirun would. Horovod here is built with Gloo, so nothing else would notice.
"""
import importlib.abc
import importlib.util
import json
import os
import sys

GPUS = int(os.environ.get("FAKE_GPUS", "0") or 0)
RECORD = os.environ.get("FAKE_GPU_RECORD", "")


def record(call: str, **fields) -> None:
    with open(os.path.join(RECORD, f"{os.getpid()}.jsonl"), "a") as f:
        f.write(json.dumps({"call": call, "argv": sys.argv[1:4], **fields,
                            **{k: os.environ[k] for k in ("RANK", "LOCAL_RANK", "HOROVOD_RANK", "HOROVOD_LOCAL_RANK",
                                                          "OMPI_COMM_WORLD_RANK") if k in os.environ}}) + "\n")


def patch_torch(torch) -> None:
    def set_device(index):
        record("torch.cuda.set_device", index=int(getattr(index, "index", index)))
        sys.stdout.flush()
        os._exit(0)  # a CPU cannot go on with a CUDA device: the binding is what this run shows

    torch.cuda.device_count = lambda: GPUS
    torch.cuda.set_device = set_device


def patch_tensorflow(tf) -> None:
    from tensorflow.python.eager.context import PhysicalDevice

    gpus = [PhysicalDevice(name=f"/physical_device:GPU:{i}", device_type="GPU") for i in range(GPUS)]
    visible = list(gpus)
    list_physical = tf.config.list_physical_devices
    capability = tuple(int(part) for part in os.environ.get("FAKE_GPU_CC", "9.0").split("."))

    def set_visible_devices(devices, device_type=None):
        if device_type == "GPU":
            chosen = devices if isinstance(devices, list) else [devices]
            visible[:] = chosen
            record("tf.config.set_visible_devices", index=[gpus.index(d) for d in chosen])
            return None
        raise AssertionError(f"set_visible_devices({devices!r}, {device_type!r}) is not faked")

    tf.config.list_physical_devices = lambda device_type=None: (
        list(gpus) if device_type == "GPU" else list_physical(device_type))
    tf.config.set_visible_devices = set_visible_devices
    tf.config.get_visible_devices = lambda device_type=None: list(visible) if device_type == "GPU" else []
    tf.config.experimental.set_memory_growth = lambda device, on: record("tf.config.experimental.set_memory_growth",
                                                                         index=gpus.index(device), on=on)
    tf.config.experimental.get_device_details = lambda device: {"compute_capability": capability}
    tf.config.experimental.get_memory_info = lambda device: {"current": 0, "peak": 0}


def patch_horovod(hvd) -> None:
    init = hvd.init

    def init_once_per_rank(*args, **kwargs):
        rank = os.environ.get("HOROVOD_RANK", "0")
        marker = os.path.join(RECORD, f"mpi-init-rank-{rank}")
        if os.path.exists(marker):
            print("MPI_Init() cannot be invoked twice by the same MPI rank (even if done via two distinct processes)",
                  file=sys.stderr, flush=True)
            os._exit(1)
        open(marker, "w").close()
        record("hvd.init")
        return init(*args, **kwargs)

    hvd.init = init_once_per_rank


class _PatchAfterImport(importlib.abc.MetaPathFinder):
    """Runs a patch on a module once it has been executed (its first import), whoever imports it. A probe that
    only looks for the module (importlib.util.find_spec, as train's framework check does) does not use the patch
    up: it stays until a module is executed, and a module that is not installed gets none."""

    def __init__(self, patches):
        self.patches, self.looking = patches, set()

    def find_spec(self, fullname, path=None, target=None):
        if fullname not in self.patches or fullname in self.looking:
            return None
        self.looking.add(fullname)
        try:
            spec = importlib.util.find_spec(fullname)  # the real one (this finder does not answer meanwhile)
        finally:
            self.looking.discard(fullname)
        if spec is None or spec.loader is None:
            return spec
        execute, patches = spec.loader.exec_module, self.patches

        def exec_module(module):
            execute(module)
            patch = patches.pop(fullname, None)
            if patch:
                patch(module)

        spec.loader.exec_module = exec_module
        return spec


if GPUS or os.environ.get("FAKE_MPI_RANKS"):
    patches = {}
    if GPUS:
        patches.update({"torch": patch_torch, "tensorflow": patch_tensorflow})
    if os.environ.get("FAKE_MPI_RANKS"):
        patches.update({"horovod.torch": patch_horovod, "horovod.tensorflow": patch_horovod})
    sys.meta_path.insert(0, _PatchAfterImport(patches))
