"""The model card's pure parts (training/model_card.py, training/data/folder.py's class count, the runner's choice of
--num-classes), framework-free: the ONNX round trip and predict are tested in each framework's environment
(tests/training/pytorch/test_model_card.py, tests/training/tensorflow/test_export_tf.py)."""
import pytest

from training.config import TrainConfig
from training.data.folder import class_names, num_classes
from training.errors import UsageError
from training.model_card import ModelCard, run_id
from training.runner import with_classes


def test_the_class_count_comes_from_the_folder_and_a_given_one_must_agree(tmp_path):
    for name in ("ship", "cat", "dog"):
        (tmp_path / "train" / name).mkdir(parents=True)
    (tmp_path / "train" / "notes.txt").write_text("not a class")
    assert class_names(tmp_path) == ["cat", "dog", "ship"]  # sorted: the label order of both frameworks
    assert num_classes(0, ["cat", "dog", "ship"], tmp_path) == num_classes(3, ["cat", "dog", "ship"], tmp_path) == 3
    with pytest.raises(UsageError, match=r"--num-classes 1000: .* 3 class folders in train/ \(cat, dog, ship\); leave"):
        num_classes(1000, ["cat", "dog", "ship"], tmp_path)
    cfg, classes = with_classes(TrainConfig(data=str(tmp_path)))
    assert (cfg.num_classes, classes) == (3, ("cat", "dog", "ship"))
    assert with_classes(TrainConfig(data="synthetic"))[0].num_classes == 1000  # ImageNet's, as before
    assert with_classes(TrainConfig(data="synthetic", num_classes=4)) == (TrainConfig(data="synthetic", num_classes=4),
                                                                          None)


def test_the_card_survives_onnx_metadata_and_refuses_what_it_did_not_write():
    card = ModelCard(num_classes=3, image_size=32, classes=("cat", "dog", "ship"), framework="pytorch", run_id="r")
    props = card.metadata()
    assert all(isinstance(v, str) for v in props.values()) and props["classes"] == '["cat", "dog", "ship"]'
    assert ModelCard.from_metadata(props, num_classes=3, image_size=0) == card
    assert ModelCard.from_metadata({}, num_classes=5, image_size=224).name(4) == "4"  # another exporter's file
    with pytest.raises(ValueError, match="names 3 classes for 4 logits"):
        ModelCard.from_metadata(props, num_classes=4, image_size=32)
    with pytest.raises(ValueError, match="input_layout 'CHW'"):
        ModelCard.from_metadata({**props, "input_layout": "CHW"}, num_classes=3, image_size=32)


def test_the_run_id_is_azure_mls_run_or_the_batch_task():
    assert run_id({"AZUREML_RUN_ID": "job_1", "AZ_BATCH_JOB_ID": "j"}) == "job_1"
    assert run_id({"AZ_BATCH_JOB_ID": "train-1", "AZ_BATCH_TASK_ID": "main"}) == "train-1/main"
    assert run_id({}) != run_id({}) and len(run_id({})) == 12
