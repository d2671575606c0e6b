"""DDP's settings beyond its defaults (training/pytorch/distributed.py ddp_settings), for the torch of this
environment and for the older one on the device machine (torch 2.11: broadcast_buffers, no forward_sync_buffers)."""
import inspect

from torch.nn.parallel import DistributedDataParallel

from training.pytorch.distributed import ddp_settings


def test_no_buffer_broadcast_each_step_and_gradients_as_bucket_views_in_any_torch():
    here = inspect.signature(DistributedDataParallel).parameters
    settings = ddp_settings(here)
    assert settings["gradient_as_bucket_view"] is True and set(settings) <= set(here)
    assert False in (settings.get("forward_sync_buffers"), settings.get("broadcast_buffers"))
    older = ("module", "device_ids", "broadcast_buffers", "gradient_as_bucket_view", "static_graph")
    assert ddp_settings(older) == {"gradient_as_bucket_view": True, "broadcast_buffers": False}
