"""The exchange share as the Horovod step times it on a GPU (training/pytorch/distributed.py Horovod.step), with the
GPU's streams from the GPU-shaped harness (tests/training/gpu_harness.py CudaStreams): a run whose all-reduce is
slow must read exchange-bound, not compute-bound. Horovod's NCCL runs on its own stream, so a device-wide
synchronize before the timed wait would put the exchange into compute."""
import time

import pytest
import torch

from tests.training.gpu_harness import CudaStreams
from training import efficiency
from training.pytorch import distributed


@pytest.mark.parametrize("exchange_s, label", [(0.06, efficiency.EXCHANGE), (0.0, efficiency.COMPUTE)])
def test_a_slow_all_reduce_on_a_gpu_is_exchange_bound(monkeypatch, exchange_s, label):
    gpu = CudaStreams(backward_s=0.03, exchange_s=exchange_s)
    gpu.patch(monkeypatch, torch)
    horovod = object.__new__(distributed.Horovod)  # the step alone: no hvd.init()
    horovod.device = torch.device("cuda", 0)
    optimizer, times = gpu.horovod_optimizer(), efficiency.StepTimes()
    for _ in range(3):  # as TorchLoop.fit times a step
        computing = time.perf_counter()
        gpu.queue_backward()  # forward and backward queued; Horovod's hooks queue the all-reduces behind them
        exchange = horovod.step(optimizer, None)
        done = time.perf_counter()
        times.add(0.0, done - computing - exchange, exchange)
    bound = efficiency.classify(times)
    assert bound.label == label, bound.text()
    if exchange_s:
        assert bound.shares["exchange"] > 0.5  # 60 of 90 ms a step
