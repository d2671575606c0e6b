"""torch.compile's workers and caches on an 8-GPU node (training/pytorch/loop.py compile_env)."""
from training.pytorch.loop import compile_env


def test_each_rank_compiles_with_its_share_of_the_cores_and_caches_on_the_nodes_own_disk():
    env = {"AZ_BATCH_NODE_SHARED_DIR": "/mnt/batch/tasks/shared"}
    assert compile_env(env, cores=96, local_size=8) == {
        "TORCHINDUCTOR_COMPILE_THREADS": "12", "TORCHINDUCTOR_CACHE_DIR": "/mnt/batch/tasks/shared/torchinductor",
        "TRITON_CACHE_DIR": "/mnt/batch/tasks/shared/triton"}
    assert compile_env({}, cores=2, local_size=8) == {"TORCHINDUCTOR_COMPILE_THREADS": "1"}  # outside Batch: /tmp
    assert compile_env({**env, "TORCHINDUCTOR_COMPILE_THREADS": "4", "TRITON_CACHE_DIR": "/x"}, 96, 8) == {
        "TORCHINDUCTOR_CACHE_DIR": "/mnt/batch/tasks/shared/torchinductor"}  # what the user set wins
