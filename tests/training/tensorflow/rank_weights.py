"""Run TensorFlow/Keras training in-process on each rank, then save that rank's trainable weights.

Trainable weights only: BatchNorm moving statistics are per-rank, as in every Horovod program."""
import pickle
import sys
from pathlib import Path

from training import runner
from training.config import parse_args
from training.tensorflow.loop import TfLoop

loops = []
runner.run(parse_args(sys.argv[1:]), lambda cfg: loops.append(TfLoop(cfg)) or loops[0])
out = Path(sys.argv[sys.argv.index("--output-dir") + 1])
with open(out / f"rank-{loops[0].rank}.pkl", "wb") as f:
    pickle.dump([w.numpy() for w in loops[0].model.trainable_weights], f)
