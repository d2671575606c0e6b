"""The watchdog's signs of life through torch.distributed's store (Azure ML, where the outputs folder is a blob-fuse
mount): a real TCPStore, two ranks' watchdogs, one of which stops beating."""
import datetime
import threading

import torch.distributed as dist

from training.errors import EXIT_HANG
from training.pytorch.distributed import StoreSigns, store_signs
from training.watchdog import Bounds, Watchdog


def test_a_rank_whose_sign_of_life_in_the_store_stops_is_named(tmp_path):
    timeout = datetime.timedelta(seconds=10)
    server = dist.TCPStore("127.0.0.1", 0, 2, True, timeout=timeout, wait_for_workers=False)
    client = dist.TCPStore("127.0.0.1", server.port, 2, False, timeout=timeout)
    rank1 = StoreSigns(client, 2)
    rank1.write({"rank": 1, "host": "10.0.0.5", "pid": 1, "beats": 1, "step": 4, "progress": 8})  # then silent
    clock, got, ended = [0.0], {}, threading.Event()

    def on_expire(line, record):
        got.update(record=record)
        ended.set()

    dog = Watchdog(0, 2, tmp_path, Bounds(first_s=100, floor_s=10, factor=5, busy_s=50, poll_s=0.01), host="10.0.0.4",
                   clock=lambda: clock[0], on_expire=on_expire, signs=StoreSigns(server, 2)).start()
    for step in range(1, 6):
        clock[0] = step
        dog.stepped(step)
    clock[0] = 5 + 11
    assert ended.wait(5)
    dog.stop()
    assert (got["record"]["blamed_ranks"], got["record"]["blamed_hosts"], got["record"]["exit_code"]) == (
        [1], ["10.0.0.5"], EXIT_HANG)
    assert not list(tmp_path.glob(".watchdog/*"))  # nothing written to the outputs folder
    assert not server.check([StoreSigns.key(0)])  # a stopped watchdog leaves no sign of life behind


def test_the_store_is_used_under_azure_ml_only():
    assert store_signs({}, 2) is None
