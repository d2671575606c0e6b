"""Run training in-process on each rank, then save that rank's parameters: what the sync test compares.

Parameters only: BatchNorm running statistics are per-rank buffers that Horovod does not average."""
import sys
from pathlib import Path

import torch

from training.config import parse_args
from training.train_torch import run

trained = run(parse_args(sys.argv[1:]))
out = Path(sys.argv[sys.argv.index("--output-dir") + 1])
torch.save({name: p.detach() for name, p in trained.model.named_parameters()}, out / f"rank-{trained.rank}.pt")
