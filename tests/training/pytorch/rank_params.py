"""Run training in-process on each rank, then save that rank's parameters: what the sync test compares.

Parameters only: BatchNorm running statistics are per-rank buffers that Horovod does not average."""
import sys
from pathlib import Path

import torch

from training import runner
from training.config import parse_args
from training.pytorch.loop import TorchLoop

loops = []
runner.run(parse_args(sys.argv[1:]), lambda cfg: loops.append(TorchLoop(cfg)) or loops[0])
out = Path(sys.argv[sys.argv.index("--output-dir") + 1])
torch.save({name: p.detach() for name, p in loops[0].module.named_parameters()}, out / f"rank-{loops[0].rank}.pt")
