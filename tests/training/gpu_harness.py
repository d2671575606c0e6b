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
