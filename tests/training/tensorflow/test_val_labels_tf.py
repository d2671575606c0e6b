"""TensorFlow's and Keras's folder data labels val/ by train/'s classes: a val/ that lacks train/'s first class
(cat) keeps dog 1 and ship 2, as the model's head numbers them (training/data/folder.py: scan)."""
from tests.training.training_env import train_without_first_val_class
from training.config import TrainConfig
from training.tensorflow.data import Data


def test_a_val_without_the_first_class_is_evaluated_under_train_labels(tmp_path):
    import tensorflow as tf

    train_without_first_val_class(tmp_path)
    cfg = TrainConfig(data=str(tmp_path), image_size=32, batch_size=2, workers=0, num_classes=3)
    files, labels = Data(tf, cfg, 0, 1).val
    assert [name.split("/")[-2] for name in files] == ["dog", "dog", "ship", "ship"]
    assert labels == [1, 1, 2, 2]  # the old scan numbered val/'s own folders: dog 0, ship 1
