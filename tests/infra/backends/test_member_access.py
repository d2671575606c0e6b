"""A team member's access without the stack's secrets: the member file (`python -m infra member-file`) holds the
outputs the job and data verbs read and no secret, the verbs run from it (no Pulumi state, no --stack), they follow
Pulumi's selected stack otherwise, and a firewall's 403 tells a member whom to ask for what."""
import json
import subprocess

import pytest

from infra.backends import backend
from infra.backends.shared import JobError, StackOutputs, member_outputs, refused_line, selected_stack
from infra.backends.staging import Readiness
from infra.cli.main import main
from tests.infra.backends.batch.test_operate import OUTPUTS
from tests.infra.backends.test_signin_and_firewalls import NOT_AUTHORIZED
from tests.infra.conftest import STACKS, evaluation_for


def staged(data_url, status_url):
    return Readiness(True, "the NFS server staged 160 files")


@pytest.mark.parametrize("stack", STACKS)
def test_the_member_file_of_each_stack_holds_what_its_verbs_read_and_no_secret(stack, tmp_path, capsys):
    ev = evaluation_for(stack)
    assert ev.secret_outputs  # the SAS: what a member must never get
    # What `pulumi stack output --json` prints without --show-secrets.
    shown = {key: "[secret]" if key in ev.secret_outputs else value for key, value in ev.outputs.items()}
    for values in (ev.outputs, shown):  # with or without the secrets shown, none reaches the file
        (tmp_path / "outputs.json").write_text(json.dumps(values))
        member = tmp_path / f"member-{stack}.json"
        assert main(["member-file", "--stack", stack, "--outputs", str(tmp_path / "outputs.json"),
                     "-o", str(member)]) == 0
        out = capsys.readouterr().out
        written = json.loads(member.read_text())
        assert not set(written) & ev.secret_outputs and "sig=" not in member.read_text()
        assert f"left out: {', '.join(sorted(ev.secret_outputs))}" in out
        StackOutputs.require(backend(written["backend"]).required_outputs + ("container_urls",), written)
        assert not (tmp_path / f"member-{stack}.json.part").exists()


def test_a_secret_under_another_name_is_left_out_too():
    kept, left_out = member_outputs("dev", {**OUTPUTS, "backend": "batch", "containerUrls": {
        "data": "https://st.blob.core.windows.net/data?sv=2024-01-01&sp=rl&sig=LEAK"}})
    assert "sig=" not in json.dumps(kept) and left_out == ["containerUrls", "sas"]


def test_a_member_submits_and_follows_from_the_member_file_alone(batch, tmp_path, capsys, monkeypatch):
    (tmp_path / "full.json").write_text(json.dumps({**OUTPUTS, "backend": "batch"}))
    member = tmp_path / "member-dev.json"
    assert main(["member-file", "--stack", "dev", "--outputs", str(tmp_path / "full.json"), "-o", str(member)]) == 0
    capsys.readouterr()
    monkeypatch.setenv("PATH", str(tmp_path))  # no Pulumi CLI: the member file names the stack
    verb = dict(batch_factory=lambda endpoint: batch, staged=staged)
    assert main(["submit", "--outputs", str(member), "--nodes", "1"], **verb) == 0
    [job] = batch.jobs
    out = capsys.readouterr().out
    assert job.startswith("train-dev-") and "SIG" not in json.dumps(batch.tasks[job]) + out
    assert main(["status", "--outputs", str(member)], **verb) == 0
    assert f"job {job}: active" in capsys.readouterr().out
    batch.files[(job, "stdout.txt")] = b"step 10 loss 6.1\n"
    assert main(["logs", "--outputs", str(member)], **verb) == 0
    assert capsys.readouterr().out == "step 10 loss 6.1\n"
    assert main(["cancel", "--outputs", str(member)], **verb) == 0


def test_a_member_file_of_another_stack_is_refused_in_one_line(tmp_path, capsys):
    (tmp_path / "full.json").write_text(json.dumps({**OUTPUTS, "backend": "batch"}))
    member = tmp_path / "member-dev.json"
    assert main(["member-file", "--stack", "dev", "--outputs", str(tmp_path / "full.json"), "-o", str(member)]) == 0
    capsys.readouterr()
    assert main(["status", "--stack", "vision", "--outputs", str(member)]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "is the member file of stack dev, not vision: pass --stack dev" in err


def test_without_stack_the_verbs_follow_pulumis_selection_or_say_to_pass_it(tmp_path, capsys, monkeypatch):
    def pulumi(answer, code=0):
        return lambda argv, **kw: subprocess.CompletedProcess(argv, code, answer, "error: no stack selected")

    assert selected_stack(pulumi("vision\n")) == "vision"
    with pytest.raises(JobError, match="select one with `pulumi stack select NAME`"):
        selected_stack(pulumi("", 255))
    monkeypatch.setenv("PATH", str(tmp_path))  # no Pulumi CLI on this machine
    for argv in (["status"], ["submit"], ["upload", str(tmp_path)], ["restage"], ["member-file"]):
        assert main(argv) == 2, argv
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "pass --stack NAME" in err, err


def test_a_members_403_names_the_stacks_file_and_who_adds_the_address(batch, tmp_path, capsys):
    (tmp_path / "full.json").write_text(json.dumps({**OUTPUTS, "backend": "batch"}))
    member = tmp_path / "member-dev.json"
    main(["member-file", "--stack", "dev", "--outputs", str(tmp_path / "full.json"), "-o", str(member)])
    capsys.readouterr()
    batch.endpoint.refuse = (403, *NOT_AUTHORIZED)
    assert main(["status", "--outputs", str(member)], batch_factory=lambda endpoint: batch) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "allowedIpRanges in Pulumi.dev.yaml" in err
    assert "ask the stack's platform team to add it" in err and "curl -s https://ifconfig.me" in err


def test_a_refusal_that_names_the_callers_address_passes_it_on():
    from azure.core.exceptions import HttpResponseError

    err = HttpResponseError("Client address is not authorized and caller is not a trusted service.\r\nClient "
                            "address: 203.0.113.7")
    err.status_code = 403
    line = str(refused_line(err, "the Batch account", "listing jobs", "not admitted"))
    assert "this machine's address as Azure saw it, 203.0.113.7, must be in allowedIpRanges" in line
