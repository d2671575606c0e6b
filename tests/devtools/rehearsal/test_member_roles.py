"""The rehearsal's team member (devtools/rehearsal/run.py: MEMBER_CLIENT_ID): the stack's teamMembers group gains the
rehearsal's group, so the program declares the members' grants, and storage and Batch honour exactly those; no
nodes, no Azurite (the end-to-end test in test_rehearsal.py plays the member's whole path)."""
import pytest

from devtools.rehearsal.identities import DEPLOYER, MEMBER_GROUP, batch_token, rehearsed_config
from devtools.rehearsal.storage import Account, principal_of
from infra.preview import offline


@pytest.fixture(scope="module")
def ev():
    return offline.evaluate(rehearsed_config("dev"))


def test_the_member_group_gets_the_programs_member_grants_and_nothing_more(ev):
    assert rehearsed_config("dev").access.members == (MEMBER_GROUP,)
    account = Account(None, ev)  # permissions only: Azurite is not asked
    granted = {c: account.permissions_of(MEMBER_GROUP, c) for c in ("data", "outputs", "status", "scripts")}
    # upload to `data`, download from `outputs`; `scripts` (the job's code) refused, and `status` too: with dataTier
    # node-local (dev) there is no NFS staging to restage
    assert granted == {"data": "acdlrw", "outputs": "lr", "status": "t", "scripts": "t"}


def test_batch_takes_the_deployer_and_the_job_submitters_and_refuses_other_identities(ev):
    class Ad:
        tokens = {"deployer": DEPLOYER, "member": MEMBER_GROUP,
                  "nodes": principal_of(ev, ev.outputs["pullIdentityId"])}

    authorized = batch_token(Ad, ev)
    assert authorized("deployer") and authorized("member")
    assert not authorized("nodes") and not authorized("unknown")


def test_a_job_from_a_member_file_names_the_account_by_its_urls_here(ev):
    account = Account(None, ev)
    declared = ev.outputs["containerUrls"]["outputs"]
    account.aliases["https://127.0.0.1:4443/devstoreaccount1/outputs"] = declared  # as AzureAd.container_url records
    assert account.container("https://127.0.0.1:4443/devstoreaccount1/outputs") == "outputs"
    with pytest.raises(LookupError):
        account.container("https://127.0.0.1:4443/devstoreaccount1/elsewhere")


def test_a_submitted_jobs_ranks_per_gpu_run_as_the_rehearsals_processes_per_node(tmp_path):
    """A member's `infra submit` asks one rank per GPU of the size (dev: 8); a node here is a CPU and runs the
    rehearsal's --processes-per-node, said once; a job that asks that already runs as it is."""
    from devtools.rehearsal.batch import RehearsalBatch

    said = []
    batch = RehearsalBatch(None, None, {}, {}, {}, tmp_path, log=said.append, slots=1)
    command = "/bin/bash -c 'set -e; python -m training launch --slots 8 --ssh-port 2222 -- --steps 4'"
    assert batch._command_here("j", command) == command.replace("--slots 8", "--slots 1")
    assert batch._command_here("j", command) == command.replace("--slots 8", "--slots 1")
    assert said == ["rehearsal: j's launch asks --slots 8 (one rank per GPU of the size); a node here is a CPU and "
                    "runs 1 (--processes-per-node)"]
    own = command.replace("--slots 8", "--slots 1")
    assert batch._command_here("k", own) == own and len(said) == 1


def test_a_nodes_coordination_command_reaches_data_at_the_storage_fronts_url(tmp_path):
    """A node here cannot resolve https://<account>.blob.core.windows.net: the coordination command runs with the
    front's URL for the declared one (reach_from_nodes' `storage`); the task keeps what it was given."""
    from devtools.rehearsal.batch import RehearsalBatch

    batch = RehearsalBatch(None, None, {}, {}, {}, tmp_path, log=lambda line: None)
    declared, here = "https://stdev.blob.core.windows.net/data", "https://127.0.0.1:4443/devstoreaccount1/data"
    batch.storage_here = {declared: here}
    command = f"/bin/bash -c 'AZURE_CLIENT_ID=c python -m training node-stage {declared} --dataset default'"
    assert batch._storage_here(command) == command.replace(declared, here)
