"""What a rank sets before hvd.init() (training/cluster/launch.py): Horovod's cycle on CPU only."""
import os

from training.cluster.launch import set_horovod_cycle


def test_a_cpu_rank_negotiates_every_10_ms_and_a_gpu_rank_keeps_horovods_default(monkeypatch):
    monkeypatch.setenv("HOROVOD_CYCLE_TIME", "recorded")  # so that monkeypatch removes what the call sets
    monkeypatch.delenv("HOROVOD_CYCLE_TIME")
    set_horovod_cycle(gpu=True)
    assert "HOROVOD_CYCLE_TIME" not in os.environ
    set_horovod_cycle(gpu=False)
    assert os.environ["HOROVOD_CYCLE_TIME"] == "10"


def test_the_users_cycle_time_wins(monkeypatch):
    monkeypatch.setenv("HOROVOD_CYCLE_TIME", "2.5")
    set_horovod_cycle(gpu=False)
    assert os.environ["HOROVOD_CYCLE_TIME"] == "2.5"
