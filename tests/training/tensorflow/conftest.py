"""TensorFlow/Keras tests run the real thing in .venv-tf: horovodrun with 2 Gloo ranks on CPU."""
import pytest

from tests.training.training_env import TrainingEnv
from training import frameworks

TF = TrainingEnv(frameworks.get("tensorflow").image.venv, {"TF_CPP_MIN_LOG_LEVEL": "3"})
PYTHON, env, training = TF.python, TF.env, TF.training
TINY = ["--image-size", "32", "--batch-size", "4", "--workers", "1", "--log-every", "2"]


def horovod(*args, np=2, timeout=400, script=None):
    return TF.horovod(*args, np=np, timeout=timeout, script=script)


@pytest.fixture(scope="session")
def dataset(tmp_path_factory):
    return TF.synth_dataset(tmp_path_factory.mktemp("dataset"))
