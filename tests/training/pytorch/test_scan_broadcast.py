"""Two real Horovod ranks (Gloo, CPU, .venv-torch) build their training data from a folder: rank 0 alone reads the
class folders and rank 1 gets the same samples through Horovod's broadcast_object (training/data/folder.py scan,
passed by training/pytorch/data.py FolderData). At 8 nodes x 8 GPUs that is 1 listing of ImageNet's train/ instead of
64 (1.28 M names each) on the share."""
import json

from tests.training.pytorch.conftest import horovod

SCRIPT = """
import json, sys
from pathlib import Path
from training.config import parse_args
from training.data import folder
from training.pytorch import distributed
from training.pytorch.data import FolderData

reads = []
listing = folder._listing
folder._listing = lambda root, split: reads.append(split) or listing(root, split)
dist = distributed.init("horovod", "eager")
cfg = parse_args(["--data", sys.argv[1], "--image-size", "32", "--batch-size", "2", "--workers", "0"])
data = FolderData(Path(sys.argv[1]), cfg, dist.rank, dist.size, dist.device, broadcast=dist.broadcast_object)
train = [str(p) for p, _ in data.train.dataset.samples]
print("RESULT " + json.dumps({"rank": dist.rank, "reads": reads, "train": train, "val": len(data.val.dataset)}),
      flush=True)
dist.shutdown()
"""


def test_rank_0_reads_the_folders_and_rank_1_gets_the_same_samples(tmp_path):
    from PIL import Image

    root = tmp_path / "pets"
    for split, per_class in (("train", 4), ("val", 1)):
        for shade, cls in enumerate(("cat", "dog")):
            (root / split / cls).mkdir(parents=True)
            for i in range(per_class):
                Image.new("RGB", (32, 32), (100 * shade, 20 * i, 0)).save(root / split / cls / f"{i}.jpg")
    script = tmp_path / "scan.py"
    script.write_text(SCRIPT)
    out = horovod(root, script=script, timeout=120).stdout
    found = {r["rank"]: r for r in (json.loads(line.split("RESULT ", 1)[1]) for line in out.splitlines()
                                    if "RESULT " in line)}
    assert found[0]["reads"] == ["train", "val"] and found[1]["reads"] == []
    assert found[0]["train"] == found[1]["train"] and len(found[0]["train"]) == 8
    assert found[0]["val"] == found[1]["val"] == 2
