"""Run TensorFlow/Keras training in-process on each rank, then save that rank's trainable weights and the names of
the functions AutoGraph converted on the way.

Trainable weights only: BatchNorm moving statistics are per-rank, as in every Horovod program. AutoGraph writes each
function it converts to a temporary file (tensorflow/python/autograph/pyct/loader.py; removed at a normal exit),
`def tf__NAME` inside: read before exit, they say what was converted. Each rank gets a temporary folder of its own
first, so it reads only its own conversions (the suite's TMPDIR is shared by both ranks and the pytest process)."""
import importlib
import pickle
import re
import sys
import tempfile
from pathlib import Path

tempfile.tempdir = tempfile.mkdtemp(prefix="rank-")  # under the suite's TMPDIR, before TensorFlow is imported

from training import frameworks, runner
from training.config import parse_args

cfg = parse_args(sys.argv[1:])
loop_module = importlib.import_module(frameworks.get(cfg.framework).loop)  # as `python -m training train` picks it
loops = []
runner.run(cfg, lambda cfg: loops.append(loop_module.make_loop(cfg)) or loops[0])
out = Path(sys.argv[sys.argv.index("--output-dir") + 1])
converted = {name for source in Path(tempfile.gettempdir()).glob("__autograph_generated_file*.py")
             for name in re.findall(r"\bdef (tf__\w+)", source.read_text())}
with open(out / f"rank-{loops[0].rank}.pkl", "wb") as f:
    pickle.dump({"weights": [w.numpy() for w in loops[0].model.trainable_weights], "autograph": sorted(converted)},
                f)
