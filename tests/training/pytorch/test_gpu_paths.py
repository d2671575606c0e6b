"""The PyTorch paths that only run on GPU nodes, made to run here: where every entry point binds each rank under each
launcher (the GPU-shaped harness: torch told it has GPUs, the binding recorded), DDP under the Batch launcher, the
ONNX check against a TF32 forward, and the refusals."""
import json
import socket
import subprocess

import pytest
import torch

from infra import REPO_ROOT
from tests.training.gpu_harness import harness_env, recorded
from tests.training.pytorch.conftest import HOROVODRUN, PYTHON, TINY, TORCHRUN, env, training
from training.errors import UsageError
from training.pytorch import distributed
from training.pytorch.export import export_checked

SMALL = ["--data", "synthetic", "--steps", "2", *TINY]
ENTRY_POINTS = {
    "train under horovodrun": [HOROVODRUN, "--gloo", "-np", "2", "-H", "localhost:2", PYTHON, "-m", "training",
                               "train", *SMALL],
    "interconnect-check under horovodrun": [HOROVODRUN, "--gloo", "-np", "2", "-H", "localhost:2", PYTHON, "-m",
                                            "training", "interconnect-check"],
    "train --dist ddp under launch (Batch's launcher)": [PYTHON, "-m", "training", "launch", "--hosts", "localhost:2",
                                                         "--", "--dist", "ddp", *SMALL],
    # (train --dist ddp under torchrun binds through the same Ddp group as this)
    "interconnect-check --dist ddp under torchrun": [TORCHRUN, "--standalone", "--nproc-per-node", "2", "-m",
                                                     "training", "interconnect-check", "--dist", "ddp"],
}


@pytest.mark.parametrize("entry", ENTRY_POINTS)
def test_every_entry_point_binds_rank_i_to_gpu_i_under_its_launcher(entry, tmp_path):
    """On an 8-GPU node NCCL refuses two ranks on one GPU; here 2 ranks on a node of 2 faked GPUs must bind GPU 0
    and GPU 1, one each, whichever entry point and launcher started them."""
    record = tmp_path / "record"
    command = ENTRY_POINTS[entry]
    command = [*command, "--output-dir", str(tmp_path / "run")] if "train" in command else command
    result = subprocess.run(command, cwd=REPO_ROOT, env=harness_env(env(), record, gpus=2), capture_output=True,
                            text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    bound = recorded(record, "torch.cuda.set_device")
    assert sorted(b["index"] for b in bound) == [0, 1], bound


def test_more_ranks_on_a_node_than_gpus_is_refused_in_one_line(monkeypatch):
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    with pytest.raises(UsageError, match="2 ranks on this node but 1 GPU"):
        distributed.bind_gpu(1, 2)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 0)
    assert distributed.bind_gpu(1, 2) == torch.device("cpu")


@pytest.mark.parametrize("capability,bf16", [((9, 0), True), ((8, 0), True), ((7, 5), False), ((7, 0), False)])
def test_bf16_only_on_gpus_that_have_it(monkeypatch, capability, bf16):
    """A T4 (7.5, the trial stack's size) or V100 (7.0) runs bf16 emulated, slower than fp32, although
    torch.cuda.is_bf16_supported() says yes there by default: auto precision must see fp16 there."""
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: capability)
    assert distributed.has_bf16(torch.device("cuda", 0)) is bf16
    assert distributed.has_bf16(torch.device("cpu")) is False


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_ddp_under_the_batch_launcher_is_one_world_and_a_failed_export_keeps_the_summary(tmp_path, monkeypatch):
    """Batch's job starts every --dist with `python -m training launch` (horovodrun): DDP's processes map its rank
    variables, so the 2 processes are one world of 2, not two worlds of 1 fighting over one port. The same run
    diverges (LR 1e30) so its model cannot be exported (non-finite logits): rank 0 says why and keeps summary.json
    and the checkpoints, and the run exits 0, so a retried task does not train and fail again."""
    flags = [flag for flag in SMALL if flag != "--no-export"]
    monkeypatch.setenv("MASTER_PORT", str(_free_port()))  # not 29500: another run on this machine may hold it
    result = training("launch", "--hosts", "localhost:2", "--", "--dist", "ddp", *flags, "--base-lr", "1e30",
                      "--output-dir", tmp_path)
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["world_size"] == 2 and summary["distribution"] == "ddp", result.stderr[-2000:]
    assert "non-finite" in summary["export_error"] and "error: the model export failed" in result.stderr
    assert list((tmp_path / "checkpoints").glob("*.pt")) and not (tmp_path / "model.onnx").exists()


class _Tf32Convs(torch.nn.Module):
    """Eight convolutions as an A100/H100 runs them in fp32 by default: as TF32 (inputs rounded to a 10-bit
    mantissa) whenever torch.backends.cudnn.conv.fp32_precision is "tf32", PyTorch's default (its TF32 notes; that this
    switch is what the kernel is told: test_precision.py). TF32 is
    how the GPU runs the graph, not part of it: the exporter's trace gets the plain convolutions. Eight layers put
    TF32's error at about 2x the check's tolerance on this seed (ResNet50 on a GPU: 0.5x to 29x)."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.convs = torch.nn.ModuleList(torch.nn.Conv2d(3 if i == 0 else 32, 32, 3, padding=1) for i in range(8))
        for conv in self.convs:
            torch.nn.init.kaiming_normal_(conv.weight)
        self.head = torch.nn.Linear(32, 10)

    def forward(self, images):
        def tf32(t):
            if torch.jit.is_tracing() or torch.backends.cudnn.conv.fp32_precision != "tf32":
                return t
            return (t.view(torch.int32) & ~0x1FFF).view(torch.float32)  # 23 - 10 mantissa bits dropped

        features = images
        for conv in self.convs:
            features = torch.relu(torch.nn.functional.conv2d(tf32(features), tf32(conv.weight), conv.bias, padding=1))
        return self.head(features.mean((2, 3)))


def test_the_onnx_check_compares_exact_fp32_with_exact_fp32(tmp_path):
    """The reference logits come from the training GPU, where fp32 convolutions are TF32 unless turned off: the check
    must compute them in exact fp32, as onnxruntime does, or every GPU run fails at its export."""
    model = _Tf32Convs()
    assert torch.backends.cudnn.conv.fp32_precision == "tf32"  # PyTorch's default, which the training run keeps
    path = export_checked(model, tmp_path, image_size=16)
    assert path == tmp_path / "model.onnx" and path.exists()
    assert torch.backends.cudnn.conv.fp32_precision == "tf32"  # left as it was


def _aml_command(train_args: tuple[str, ...], nodes: int, distribution_note: str = "") -> str:
    """The command every process of an Azure ML job runs, as the deployer (.venv) builds it."""
    code = ("import sys; from infra.backends.azureml import job; "
            "print(job.command_line(job.AmlJobInputs(stack='s', framework='pytorch', nodes=int(sys.argv[1]), "
            "gpu_sku='Standard_ND96isr_H100_v5', environment='pytorch:1', compute='c', data_mode='download', "
            "train_args=tuple(sys.argv[2:]), max_hours=1, identity_client_id='i')))")
    result = subprocess.run([str(REPO_ROOT / ".venv" / "bin" / "python"), "-c", code, str(nodes), *train_args],
                            cwd=REPO_ROOT, capture_output=True, text=True, check=True, env={"PATH": "/usr/bin:/bin"})
    return result.stdout.strip()


def test_an_azure_ml_mpi_job_runs_one_mpi_program_per_rank(tmp_path):
    """Azure ML's MPI distribution runs the job's whole command under its own mpirun, one process per GPU, and Open MPI
    lets each rank call MPI_Init once, even from two processes (open-mpi/ompi 7025). The stand-in: Horovod's launcher
    starts the command in a shell per rank, and the harness ends a second hvd.init() of a rank as Open MPI would. The
    2-node job's interconnect check runs inside train, so the job trains."""
    command = _aml_command(("--data", "synthetic", "--steps", "2", *TINY, "--allow-slow-interconnect"), nodes=2)
    assert command.count("python -m training") == 1 and "--interconnect-check --interconnect-floor-gbps" in command
    run = tmp_path / "run"
    shell = command.replace("${{inputs.data}}", "synthetic").replace("${{outputs.run}}", str(run)) \
        .replace("python -m training", f"{PYTHON} -m training")
    record = tmp_path / "record"
    result = subprocess.run([HOROVODRUN, "--gloo", "-np", "2", "-H", "localhost:2", "bash", "-c", shell],
                            cwd=REPO_ROOT, env=harness_env(env(), record, mpi_ranks=True), capture_output=True,
                            text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    assert len(recorded(record, "hvd.init")) == 2  # one per rank
    summary = json.loads((run / "summary.json").read_text())
    assert summary["world_size"] == 2 and summary["interconnect_ranks"] == 2


def test_the_launcher_stand_in_refuses_a_second_mpi_program_in_a_rank(tmp_path):
    """The stand-in's rule itself: two Horovod programs in one rank, as `check && train` was, end non-zero with Open
    MPI's message (so the test above can fail)."""
    check = f"{PYTHON} -m training interconnect-check --iters 1 --size-mb 0.1"
    result = subprocess.run([HOROVODRUN, "--gloo", "-np", "2", "-H", "localhost:2", "bash", "-c",
                             f"{check} && {check}"], cwd=REPO_ROOT,
                            env=harness_env(env(), tmp_path / "record", mpi_ranks=True), capture_output=True,
                            text=True, timeout=300)
    assert result.returncode != 0 and "MPI_Init() cannot be invoked twice by the same MPI rank" in result.stderr
