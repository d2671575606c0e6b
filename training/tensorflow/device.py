"""Where a TensorFlow rank runs: the one place a Horovod rank is bound to its node's GPU, for `train` and
`interconnect-check` alike.

NCCL refuses two ranks on one GPU ("Duplicate GPU detected : rank N and rank M both on CUDA device", NVIDIA/nccl
src/init.cc), and TensorFlow puts every op on the first visible GPU unless told otherwise: each Horovod rank must see
only GPU `local_rank` before its first collective (Horovod's TensorFlow guide,
https://horovod.readthedocs.io/en/stable/tensorflow.html, "Pin each GPU to a single process").
"""
from __future__ import annotations

from training.errors import UsageError

BF16_FROM = (8, 0)  # compute capability with bf16 units (Ampere and later); see training.config.auto_precision


def bind_gpu(tf, local_rank: int, local_size: int) -> bool:
    """Make GPU `local_rank` this process's only visible GPU (memory grown as needed, so the check and the data
    pipeline do not reserve it all); False on a machine without GPUs. Call before any TensorFlow op."""
    gpus = tf.config.list_physical_devices("GPU")
    if not gpus:
        return False
    if local_size > len(gpus) or local_rank >= len(gpus):
        raise UsageError(f"{local_size} ranks on this node but {len(gpus)} GPU(s): start one rank per GPU (the "
                         "job's --slots)")
    tf.config.experimental.set_memory_growth(gpus[local_rank], True)
    tf.config.set_visible_devices(gpus[local_rank], "GPU")
    return True


def has_bf16(tf) -> bool:
    """Whether this process's GPU computes in bf16 (compute capability 8.0+; TensorFlow reports it per physical
    device: https://www.tensorflow.org/api_docs/python/tf/config/experimental/get_device_details)."""
    visible = tf.config.get_visible_devices("GPU")
    if not visible:
        return False
    capability = tf.config.experimental.get_device_details(visible[0]).get("compute_capability")
    return capability is not None and tuple(capability) >= BF16_FROM
