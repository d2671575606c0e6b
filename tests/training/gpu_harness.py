"""Running the real entry points with the GPU-shaped harness (tests/training/fake_gpus/sitecustomize.py): the
environment that turns it on, and what the processes recorded."""
import json
import os
from pathlib import Path

FAKE_GPUS_DIR = Path(__file__).parent / "fake_gpus"


def harness_env(base: dict[str, str], record: Path, *, gpus: int = 0, capability: str = "9.0",
                mpi_ranks: bool = False) -> dict[str, str]:
    record.mkdir(parents=True, exist_ok=True)
    env = {**base, "PYTHONPATH": os.pathsep.join([str(FAKE_GPUS_DIR), base.get("PYTHONPATH", "")]),
           "FAKE_GPU_RECORD": str(record), "FAKE_GPU_CC": capability,
           # A rank told it has a GPU keeps Horovod's 1 ms cycle (training.cluster.launch.set_horovod_cycle); on
           # these CPUs that costs cores for nothing the tests check: the CPU figure, as a user's value would.
           "HOROVOD_CYCLE_TIME": "10"}
    if gpus:
        env["FAKE_GPUS"] = str(gpus)
    if mpi_ranks:
        env["FAKE_MPI_RANKS"] = "1"
    return env


def recorded(record: Path, call: str) -> list[dict]:
    """Every process's records of `call`, in no particular order."""
    lines = (json.loads(line) for path in record.glob("*.jsonl") for line in path.read_text().splitlines())
    return [line for line in lines if line["call"] == call]


class CudaStreams:
    """A GPU's clock for the Horovod step's timing, in-process (torch.cuda's calls monkeypatched to it): each step's
    backward kernels run on the compute stream for `backward_s` after they are queued, then Horovod's NCCL stream
    all-reduces for `exchange_s`. As on a GPU, queueing returns at once; torch.cuda.synchronize() waits for every
    stream (cudaDeviceSynchronize), a stream's synchronize() for that stream, and Horovod's optimizer.synchronize()
    for the all-reduces."""

    def __init__(self, backward_s: float, exchange_s: float):
        self.backward_s, self.exchange_s = backward_s, exchange_s
        self.compute_done = self.exchange_done = 0.0

    def queue_backward(self) -> None:
        import time

        self.compute_done = time.perf_counter() + self.backward_s
        self.exchange_done = self.compute_done + self.exchange_s

    @staticmethod
    def _until(moment: float) -> None:
        import time

        time.sleep(max(0.0, moment - time.perf_counter()))

    def patch(self, monkeypatch, torch) -> None:
        streams = self

        class Stream:
            def synchronize(self):
                streams._until(streams.compute_done)

        monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: self._until(self.exchange_done))
        monkeypatch.setattr(torch.cuda, "current_stream", lambda device=None: Stream())

    def horovod_optimizer(self):
        """What distributed.Horovod.step calls on hvd.DistributedOptimizer."""
        import contextlib

        streams = self

        class Optimizer:
            def synchronize(self):
                streams._until(streams.exchange_done)

            def skip_synchronize(self):
                return contextlib.nullcontext()

            def step(self):
                pass
        return Optimizer()
