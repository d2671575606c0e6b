"""The training runtime: what the scripts container holds, the images carry, and every node runs
(`python -m training COMMAND`).

  frameworks.py the frameworks table: each one's loop module, image, environment and what it cannot do
  runner.py     one training run for every framework (plan, resume, reporting, checkpoints, summary)
  config.py     the train flags (one dataclass), schedule.py, checkpoint.py, metrics.py, report.py
  pytorch/      the PyTorch loop (Horovod or DDP), its data loader and ONNX export
  tensorflow/   the TensorFlow custom loop and Keras fit (Horovod), tf.data input, SavedModel/ONNX export
  data/         the data path: the ImageNet folder, upload and stage (blob <-> disk), their HTTP and SAS checks
  cluster/      what the Batch job runs around training: the launcher (horovodrun) and the job's own sshd
Developer-only tools (synthetic JPEGs, Azurite, benchmarks, demos) live in devtools/, never shipped.
"""
