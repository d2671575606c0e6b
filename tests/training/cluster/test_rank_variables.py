"""What each launcher tells a DDP process about its place, mapped to torch.distributed's variables (pure):
torchrun's own, mpirun's OMPI_COMM_WORLD_*, Horovod's Gloo launcher's HOROVOD_*; and where the ranks meet."""
import pytest

from training.cluster.launch import Host, ddp_rendezvous, torch_rank_env
from training.errors import UsageError

EXPECTED = {"RANK": "9", "WORLD_SIZE": "16", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "8"}


@pytest.mark.parametrize("launcher_env", [
    {"RANK": "9", "WORLD_SIZE": "16", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "8"},  # torchrun, Azure ML's PyTorch
    {"OMPI_COMM_WORLD_RANK": "9", "OMPI_COMM_WORLD_SIZE": "16", "OMPI_COMM_WORLD_LOCAL_RANK": "1",
     "OMPI_COMM_WORLD_LOCAL_SIZE": "8"},  # mpirun (Batch's job on the images)
    {"HOROVOD_RANK": "9", "HOROVOD_SIZE": "16", "HOROVOD_LOCAL_RANK": "1", "HOROVOD_LOCAL_SIZE": "8"},  # Gloo
])
def test_every_launchers_rank_variables_map_to_torch_distributeds(launcher_env):
    env = torch_rank_env({**launcher_env, "MASTER_ADDR": "10.0.0.4", "MASTER_PORT": "29500"})
    assert env == {**EXPECTED, "MASTER_ADDR": "10.0.0.4", "MASTER_PORT": "29500"}


def test_no_launcher_is_one_process_and_a_partial_one_is_refused():
    assert torch_rank_env({})["WORLD_SIZE"] == "1"
    with pytest.raises(UsageError, match="without OMPI_COMM_WORLD_LOCAL_SIZE"):
        torch_rank_env({"OMPI_COMM_WORLD_RANK": "0", "OMPI_COMM_WORLD_SIZE": "2", "OMPI_COMM_WORLD_LOCAL_RANK": "0"})
    with pytest.raises(UsageError, match="no MASTER_ADDR"):
        torch_rank_env({"HOROVOD_RANK": "0", "HOROVOD_SIZE": "2", "HOROVOD_LOCAL_RANK": "0", "HOROVOD_LOCAL_SIZE": "2"})


def test_the_ranks_meet_at_the_first_host_which_the_others_must_reach():
    assert ddp_rendezvous([Host("10.0.0.4", 8), Host("10.0.0.5", 8)]) == {"MASTER_ADDR": "10.0.0.4",
                                                                          "MASTER_PORT": "29500"}
    assert ddp_rendezvous([Host("localhost", 2)])["MASTER_ADDR"] == "127.0.0.1"
    assert ddp_rendezvous([Host("localhost", 2)], port=41000)["MASTER_PORT"] == "41000"
    with pytest.raises(UsageError, match="name this host by its address"):
        ddp_rendezvous([Host("localhost", 8), Host("10.0.0.5", 8)])
