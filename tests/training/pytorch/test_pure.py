"""Pure parts of training: LR schedule, throughput statistics, checkpoint files, the package's imports."""
import ast

import pytest

from infra import REPO_ROOT
from training import checkpoint, metrics
from training.schedule import lr_at, peak_lr


def import_graph(root, package="training"):
    """Module -> the modules of `package` it imports, at the top or inside a function (a lazy import closes a
    loop just the same: pytorch/data.py imports pytorch/dali.py when --loader dali is asked for)."""
    files = {".".join(p.relative_to(root).with_suffix("").parts).removesuffix(".__init__"): p
             for p in sorted((root / package).rglob("*.py"))}
    graph = {}
    for name, path in files.items():
        found = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                found |= {node.module, *(f"{node.module}.{alias.name}" for alias in node.names)}
            elif isinstance(node, ast.Import):
                found |= {alias.name for alias in node.names}
        graph[name] = {module for module in found if module in files and module != name}
    return graph


def import_loops(graph):
    loops, done = [], set()

    def visit(module, path):
        for imported in sorted(graph[module]):
            if imported in path:
                loops.append(" -> ".join(path[path.index(imported):] + [imported]))
            elif imported not in done:
                visit(imported, path + [imported])
        done.add(module)

    for module in sorted(graph):
        if module not in done:
            visit(module, [module])
    return loops


def test_no_two_training_modules_import_each_other():
    # The loaders share their crops and sample order through pytorch/sampling.py, which imports no loader.
    assert import_loops(import_graph(REPO_ROOT)) == []


def test_an_import_loop_is_found_and_named(tmp_path):
    package = tmp_path / "training" / "pytorch"
    package.mkdir(parents=True)
    (package / "data.py").write_text("def folder():\n    from training.pytorch.dali import DaliBatches\n")
    (package / "dali.py").write_text("from training.pytorch.data import training_crop\n")
    assert import_loops(import_graph(tmp_path)) == ["training.pytorch.dali -> training.pytorch.data -> "
                                                    "training.pytorch.dali"]


def test_peak_lr_scales_with_global_batch():
    assert peak_lr(0.1, 256) == pytest.approx(0.1)
    assert peak_lr(0.1, 8192) == pytest.approx(3.2)


def test_warmup_is_linear_then_cosine_decays_to_zero():
    kw = dict(peak=3.2, total_steps=100, warmup_steps=10, schedule="cosine", base_lr=0.1)
    assert lr_at(0, **kw) == pytest.approx(0.1)
    assert lr_at(5, **kw) == pytest.approx(0.1 + 3.1 * 0.5)
    assert lr_at(10, **kw) == pytest.approx(3.2)
    assert lr_at(55, **kw) == pytest.approx(1.6)
    assert lr_at(100, **kw) == pytest.approx(0.0, abs=1e-9)


def test_step_schedule_drops_tenfold_at_30_60_80_percent():
    kw = dict(peak=1.0, total_steps=100, warmup_steps=0, schedule="step", base_lr=0.1)
    assert [lr_at(s, **kw) for s in (29, 30, 60, 80)] == pytest.approx([1.0, 0.1, 0.01, 0.001])


def test_mean_ci_is_196_sigma():
    mean, ci = metrics.mean_ci([10.0, 20.0])
    assert mean == 15.0 and ci == pytest.approx(1.96 * 5.0)


def test_checkpoints_are_atomic_and_pruned(tmp_path):
    saved = []
    for step in (1, 2, 3, 4):
        checkpoint.save(tmp_path, step, {"s": step}, lambda state, p: p.write_text(str(state["s"])), keep=2)
        saved.append(step)
    assert [p.name for p in checkpoint.listed(tmp_path)] == ["ckpt-00000003.pt", "ckpt-00000004.pt"]
    assert not list(tmp_path.glob("*.tmp"))
    (tmp_path / "ckpt-00000004.pt").write_text("garbage")

    def load(path):
        if not path.read_text().isdigit():
            raise ValueError("corrupt")
        return int(path.read_text())

    assert checkpoint.newest_valid(tmp_path, load) == (tmp_path / "ckpt-00000003.pt", 3)


def test_compile_runs_under_ddp_only():
    """Horovod's gradient hooks fire only after a compiled backward ends (PyTorch's compiler FAQ), so a compiled
    Horovod run would exchange nothing while backward computes: refused, pointing at DDP, whose compiled graph is
    split at its buckets (devtools/overlap_benchmark.py measures both)."""
    from training.config import TrainConfig
    from training.errors import UsageError

    with pytest.raises(UsageError, match="--compile with --dist horovod .*use --dist ddp --compile"):
        TrainConfig(compile=True).validate()
    TrainConfig(compile=True, dist="ddp").validate()
    TrainConfig(dist="horovod").validate()


def test_compile_mode_needs_compile():
    from training.config import TrainConfig
    from training.errors import UsageError

    with pytest.raises(UsageError, match="--compile-mode reduce-overhead applies with --compile; add --compile"):
        TrainConfig(compile_mode="reduce-overhead", dist="ddp").validate()
    TrainConfig(compile=True, compile_mode="reduce-overhead", dist="ddp").validate()


def test_sgd_is_fused_on_a_gpu_only():
    """The fused step is torch's one-kernel SGD update on CUDA (the pinned torch must still have that kernel for
    CUDA, or the GPU run fails at its first step); on CPU the default (for-each) path stays."""
    import torch
    from torch.utils._foreach_utils import _get_fused_kernels_supported_devices

    from training.config import TrainConfig
    from training.pytorch import optim

    assert optim.fused_step(torch.device("cuda", 0)) is True and "cuda" in _get_fused_kernels_supported_devices()
    assert optim.fused_step(torch.device("cpu")) is None
    cpu = optim.build(torch.nn.Linear(2, 2), TrainConfig(optimizer="sgd"))
    assert cpu.param_groups[0]["fused"] is None
    if torch.cuda.is_available():
        gpu = optim.build(torch.nn.Linear(2, 2).cuda(), TrainConfig(optimizer="sgd"))
        assert gpu.param_groups[0]["fused"] is True


def test_a_resumed_optimizer_keeps_this_process_step_not_the_checkpoints():
    """A checkpoint saved before the fused default (or on CPU) holds fused None; resumed on a GPU the step stays
    fused. The momentum buffers and hyperparameters still come from the checkpoint."""
    import torch

    from training.pytorch import optim

    model = torch.nn.Linear(2, 2)
    old = torch.optim.SGD(model.parameters(), lr=0.5, momentum=0.9)
    model(torch.ones(1, 2)).sum().backward()
    old.step()
    saved = old.state_dict()
    new = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    new.param_groups[0]["fused"] = True  # as optim.build sets it on a GPU
    optim.load_state(new, saved)
    assert new.param_groups[0]["fused"] is True and new.param_groups[0]["lr"] == 0.5
    assert torch.equal(new.state[model.weight]["momentum_buffer"], old.state[model.weight]["momentum_buffer"])
