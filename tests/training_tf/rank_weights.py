"""Run TensorFlow/Keras training in-process on each rank, then save that rank's trainable weights.

Trainable weights only: BatchNorm moving statistics are per-rank, as in every Horovod program."""
import pickle
import sys
from pathlib import Path

from training.config import parse_args
from training.train_tf import run

trained = run(parse_args(sys.argv[1:]))
out = Path(sys.argv[sys.argv.index("--output-dir") + 1])
with open(out / f"rank-{trained.rank}.pkl", "wb") as f:
    pickle.dump([w.numpy() for w in trained.model.trainable_weights], f)
