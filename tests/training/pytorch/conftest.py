"""Training tests run the real thing in .venv-torch: horovodrun with 2 Gloo ranks on CPU, torchrun for DDP."""
import pytest

from tests.training.training_env import TrainingEnv
from training import frameworks

TORCH = TrainingEnv(frameworks.get("pytorch").image.venv)
PYTHON, HOROVODRUN, TORCHRUN = TORCH.python, TORCH.horovodrun, str(TORCH.bin_dir / "torchrun")
env, training, horovod = TORCH.env, TORCH.training, TORCH.horovod
# Small and fast on 2 cores: 32 px images, batch 4 per rank, 1 loader worker.
TINY = ["--image-size", "32", "--batch-size", "4", "--workers", "1", "--log-every", "2", "--no-export"]


@pytest.fixture(scope="session")
def dataset(tmp_path_factory):
    return TORCH.synth_dataset(tmp_path_factory.mktemp("dataset"))


@pytest.fixture(scope="session")
def photos(tmp_path_factory):
    """Real JPEG files at ImageNet's sizes and aspect ratios (400-500 x 350-500 px), so crops differ per image."""
    root = tmp_path_factory.mktemp("photos")
    TORCH.devtools("synth-data", "--out", root, "--classes", "4", "--per-class", "10", "--val-per-class", "0",
                   "--imagenet-sizes")
    return root
