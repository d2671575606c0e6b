"""devtools/batch_container.py's pure parts (cheap, in `make test`): Batch's docker create composition of the task
the project builds (infra/backends/batch/spec.py), and the sandbox rule. Docker itself parses them in
tests/images/test_containers.py (`make test-containers`)."""
import shlex

from devtools import batch_container
from infra.backends.batch import spec as batch_spec

ROOT = "/mnt/batch"
ENV = {"AZ_BATCH_NODE_ROOT_DIR": ROOT, "AZ_BATCH_TASK_WORKING_DIR": f"{ROOT}/workitems/j/job-1/train/wd",
       "AZ_BATCH_TASK_SHARED_DIR": f"{ROOT}/workitems/j/job-1/train", "AZ_BATCH_HOST_LIST": "10.0.0.4,10.0.0.5"}


def job_inputs(gpu_sku="Standard_ND96isr_H100_v5"):
    return batch_spec.JobInputs(
        stack="dev", pool_id="gpu", nodes=2, gpu_sku=gpu_sku, framework="pytorch",
        image="cr.azurecr.io/pytorch:latest@sha256:00", registry_server="cr.azurecr.io",
        node_identity_id="/subscriptions/s/resourceGroups/rg/providers/Microsoft.ManagedIdentity/"
                         "userAssignedIdentities/pull", node_identity_client_id="client-pull",
        train_args=("--epochs", "1"), retries=0, max_hours=1, data_wait_minutes=1, local_cache=False,
        scripts_url="https://st.blob.core.windows.net/scripts", outputs_url="https://st.blob.core.windows.net/outputs")


def test_the_task_is_composed_as_batch_documents_it():
    task = batch_spec.task_spec(job_inputs(), "j")
    args = batch_container.docker_create_args(task, ENV, "local:base", "train-0")
    assert args[:4] == ["--name", "train-0", "-v", f"{ROOT}:{ROOT}"]  # the whole Batch root, at the same path
    assert f"AZURE_CLIENT_ID=client-pull" in args and f"AZ_BATCH_HOST_LIST=10.0.0.4,10.0.0.5" in args
    assert args[args.index("-w") + 1] == ENV["AZ_BATCH_TASK_WORKING_DIR"]
    options = shlex.split(task["containerSettings"]["containerRunOptions"])
    image = args.index("local:base")
    assert args[image - len(options):image] == options  # appended after Batch's own, as declared
    assert args[image + 1:] == shlex.split(task["commandLine"]) and args[image + 1] == "/bin/bash"


def test_the_sandbox_rule_leaves_out_only_what_this_machine_lacks():
    options = batch_spec.container_run_options(job_inputs().sku)
    kept, left = batch_container.sandbox_options(options, exists=lambda path: False, memlock_hard=8192 * 1024)
    assert left == ["--ulimit", "memlock=-1", "--device=/dev/infiniband", "-v", "/opt/microsoft:/opt/microsoft:ro"]
    assert kept == ["--network=host", "--ipc=host", "--ulimit", "stack=67108864", "--cap-add=IPC_LOCK"]
    # A machine that has all of it keeps everything, in order.
    kept, left = batch_container.sandbox_options(options, exists=lambda path: True, memlock_hard=-1)
    assert left == [] and kept == shlex.split(options)


def test_the_job_leaves_the_gpus_to_batch():
    # "Batch automatically enables GPU for container tasks, so you shouldn't include the --gpus argument"
    # (https://learn.microsoft.com/azure/batch/batch-docker-container-workloads).
    for sku in ("Standard_ND96isr_H100_v5", "Standard_NC24ads_A100_v4"):
        assert "--gpus" not in batch_spec.container_run_options(job_inputs(sku).sku)


def test_a_size_without_infiniband_asks_for_no_device():
    options = batch_spec.container_run_options(job_inputs("Standard_NC24ads_A100_v4").sku)
    assert "--device" not in options and "/opt/microsoft" not in options


def test_a_rehearsal_node_stands_in_for_the_host_by_the_node_rule():
    task = batch_spec.task_spec(job_inputs(), "j")
    args = batch_container.docker_create_args(task, ENV, "local:base", "train-0")
    local = batch_container.on_local_node(args, anchor="node0-anchor", batch_root=ROOT, node_root="/w/node0/batch",
                                          mounts={"/w/export": f"{ROOT}/fsmounts/data"}, cpus="0")
    assert "--network=host" not in local and "--network=container:node0-anchor" in local
    assert local[local.index("-v") + 1] == f"/w/node0/batch:{ROOT}"
    image = local.index("local:base")
    assert local[image - 4:image] == ["-v", f"/w/export:{ROOT}/fsmounts/data", "--cpuset-cpus", "0"]
    # Everything else as composed, in order: only the network, the root's source and the additions differ.
    rest = [w for w in local[:image - 4] + local[image:]
            if w not in ("--network=container:node0-anchor", f"/w/node0/batch:{ROOT}")]
    assert rest == [w for w in args if w not in ("--network=host", f"{ROOT}:{ROOT}")]
    # The other spelling of the host network, too; a task without it is refused (its containers would be off-node).
    spelled = ["--name", "n", "--network", "host", "img", "true"]
    assert batch_container.on_local_node(spelled, anchor="a", batch_root=ROOT, node_root="/x", mounts={},
                                         cpus="1")[2:4] == ["--network=container:a", "--cpuset-cpus"]
    try:
        batch_container.on_local_node(["--name", "n", "img"], anchor="a", batch_root=ROOT, node_root="/x",
                                      mounts={}, cpus="1")
        raise AssertionError("a task without the host network was not refused")
    except ValueError as err:
        assert "host network" in str(err)


def test_the_stand_in_changes_only_the_horovod_step_of_each_dockerfile():
    from devtools.rehearsal.containers import CONTEXT_WHEELS, STAND_IN_UCX, stand_in_dockerfile
    from infra import REPO_ROOT
    from training import frameworks

    ucx = ["# The stand-in has no InfiniBand (devtools/rehearsal/containers.py STAND_IN_UCX)",
           "ENV UCX_TLS=tcp,sm,self OMPI_MCA_pml_ucx_tls=any OMPI_MCA_pml_ucx_devices=any"]
    assert STAND_IN_UCX["UCX_TLS"] == "tcp,sm,self"
    for image in frameworks.images():
        text = (REPO_ROOT / image.dockerfile).read_text()
        changed = stand_in_dockerfile(text, wheels=True).splitlines()
        assert changed[-2:] == ucx  # what the stand-in lacks (no InfiniBand), last, after the image's own ENV
        changed = changed[:-2]
        step = next(i for i, line in enumerate(changed) if line.startswith("RUN images/build_horovod.sh "))
        assert changed[step - 1] == f"COPY {CONTEXT_WHEELS}/ /tmp/wheels/" and "--ops mpi" in changed[step]
        assert changed[:step - 1] + [changed[step].replace("--ops mpi", "--ops nccl")] + changed[step + 1:] == \
            text.splitlines()
        assert stand_in_dockerfile(text, wheels=False).splitlines() == [
            line.replace("--ops nccl", "--ops mpi") if i == step - 1 else line
            for i, line in enumerate(text.splitlines())] + ucx
    try:
        stand_in_dockerfile("FROM x\nRUN true\n", wheels=False)
        raise AssertionError("a Dockerfile without the Horovod step was changed")
    except ValueError as err:
        assert "build_horovod.sh" in str(err)


def test_container_mode_where_the_engine_cannot_run_is_one_line(monkeypatch, tmp_path):
    from devtools.rehearsal import containers
    from devtools.rehearsal.nodes import RehearsalUnavailable

    monkeypatch.setattr(containers.docker_engine, "unavailable", lambda: "not played: a real Docker engine (why)")
    try:
        containers.ContainerPool(tmp_path, 2, tmp_path, "data", framework="pytorch")
        raise AssertionError("the pool did not refuse")
    except RehearsalUnavailable as err:
        assert str(err) == "--container: not played: a real Docker engine (why)"
