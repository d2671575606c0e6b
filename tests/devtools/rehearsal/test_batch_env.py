"""The rehearsal's nodes have Batch's documented folder tree and variables: each pinned to the example the docs give
(https://learn.microsoft.com/azure/batch/batch-compute-node-environment-variables, its tables "Environment
variables related to directory location" and "Task environment variables related to directory location", and
https://learn.microsoft.com/azure/batch/files-and-directories). Pure: no root, no nodes."""
from pathlib import Path

from devtools.rehearsal.batch import START_TASK_ENV, RehearsalBatch, batch_env
from devtools.rehearsal.nodes import BATCH_ROOT, IMAGE_USERS, node_folders, task_folders

# The variables the page documents (its "Environment variables" table).
DOCUMENTED = {
    "AZ_BATCH_ACCOUNT_NAME", "AZ_BATCH_ACCOUNT_URL", "AZ_BATCH_APP_PACKAGE", "AZ_BATCH_AUTHENTICATION_TOKEN",
    "AZ_BATCH_CERTIFICATES_DIR", "AZ_BATCH_HOST_LIST", "AZ_BATCH_IS_CURRENT_NODE_MASTER", "AZ_BATCH_JOB_ID",
    "AZ_BATCH_JOB_PREP_DIR", "AZ_BATCH_JOB_PREP_WORKING_DIR", "AZ_BATCH_MASTER_NODE", "AZ_BATCH_NODE_ID",
    "AZ_BATCH_NODE_IS_DEDICATED", "AZ_BATCH_NODE_LIST", "AZ_BATCH_NODE_MOUNTS_DIR", "AZ_BATCH_NODE_ROOT_DIR",
    "AZ_BATCH_NODE_SHARED_DIR", "AZ_BATCH_NODE_STARTUP_DIR", "AZ_BATCH_POOL_ID", "AZ_BATCH_TASK_DIR",
    "AZ_BATCH_TASK_ID", "AZ_BATCH_TASK_SHARED_DIR", "AZ_BATCH_TASK_WORKING_DIR",
    "AZ_BATCH_TASK_RESERVED_EPHEMERAL_DISK_SPACE_BYTES", "CCP_NODES",
}
# The page's example values (job batchjob001, task task001, nodes 10.0.0.4 and 10.0.0.5), on a Linux node with a
# temporary disk (root /mnt/batch, files-and-directories' "Batch root directory location").
JOB, TASK, NODES = "batchjob001", "task001", ["10.0.0.4", "10.0.0.5"]


def test_the_node_root_is_where_linux_nodes_with_a_temporary_disk_have_it():
    assert BATCH_ROOT == Path("/mnt/batch")


def test_node_folders_are_the_documented_postfixes_of_the_root():
    assert node_folders(BATCH_ROOT) == {
        "AZ_BATCH_NODE_ROOT_DIR": Path("/mnt/batch"), "AZ_BATCH_NODE_STARTUP_DIR": Path("/mnt/batch/startup"),
        "AZ_BATCH_NODE_SHARED_DIR": Path("/mnt/batch/shared"), "AZ_BATCH_NODE_MOUNTS_DIR": Path("/mnt/batch/fsmounts")}


def test_the_task_shared_folder_is_the_task_folder_and_wd_is_below_it():
    task = Path("/mnt/batch/workitems/batchjob001/job-1/task001")  # a single-run job's folder is workitems\{job}\job-1
    assert task_folders(BATCH_ROOT, JOB, TASK) == {
        "AZ_BATCH_TASK_DIR": task, "AZ_BATCH_TASK_SHARED_DIR": task, "AZ_BATCH_TASK_WORKING_DIR": task / "wd"}
    assert RehearsalBatch._task_dir_on_node(JOB, TASK) == task  # where the rehearsal downloads and logs


def test_every_variable_a_node_gets_is_documented_in_the_documented_format():
    primary, other = (batch_env(BATCH_ROOT, NODES, i, JOB, TASK) for i in (0, 1))
    assert set(primary) <= DOCUMENTED and set(START_TASK_ENV) <= set(primary)
    task = "/mnt/batch/workitems/batchjob001/job-1/task001"
    assert primary == {
        "AZ_BATCH_ACCOUNT_NAME": "rehearsal", "AZ_BATCH_POOL_ID": "gpu", "AZ_BATCH_NODE_ID": "tvm-0",
        "AZ_BATCH_NODE_IS_DEDICATED": "true", "AZ_BATCH_JOB_ID": JOB, "AZ_BATCH_TASK_ID": TASK,
        "AZ_BATCH_NODE_ROOT_DIR": "/mnt/batch", "AZ_BATCH_NODE_SHARED_DIR": "/mnt/batch/shared",
        "AZ_BATCH_NODE_STARTUP_DIR": "/mnt/batch/startup", "AZ_BATCH_NODE_MOUNTS_DIR": "/mnt/batch/fsmounts",
        "AZ_BATCH_TASK_DIR": task, "AZ_BATCH_TASK_SHARED_DIR": task, "AZ_BATCH_TASK_WORKING_DIR": f"{task}/wd",
        "AZ_BATCH_HOST_LIST": "10.0.0.4,10.0.0.5", "AZ_BATCH_NODE_LIST": "10.0.0.4;10.0.0.5",
        "AZ_BATCH_MASTER_NODE": "10.0.0.4:6000", "AZ_BATCH_IS_CURRENT_NODE_MASTER": "true"}
    assert other["AZ_BATCH_IS_CURRENT_NODE_MASTER"] == "false" and other["AZ_BATCH_MASTER_NODE"] == "10.0.0.4:6000"
    assert {k: v for k, v in other.items() if "NODE_ID" not in k and "MASTER" not in k} == {
        k: v for k, v in primary.items() if "NODE_ID" not in k and "MASTER" not in k}  # the same paths on every node


def test_the_nodes_users_are_the_images_with_sshds_privilege_separation_user():
    users = {line.split(":")[0]: line.split(":") for line in IMAGE_USERS.passwd.splitlines()}
    assert users["root"][2:] == ["0", "0", "root", "/root", "/bin/bash"]
    # As openssh-server's postinst adds it: a system user, group nogroup, home /run/sshd, no shell.
    assert users["sshd"][3:] == ["65534", "", "/run/sshd", "/usr/sbin/nologin"] and int(users["sshd"][2]) < 1000
    assert "sshd" not in IMAGE_USERS.without("sshd").passwd and "root:x:0:0" in IMAGE_USERS.without("sshd").passwd
