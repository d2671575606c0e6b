"""The efficiency view's pure parts (training/efficiency.py): classification, expectation, the progress text that
`infra status` reads back, the shortfall's cost and the job builders' flag. The runs that make each bound happen
are in tests/training/pytorch/test_efficiency_runs.py."""
import dataclasses

import pytest

from training import efficiency as eff
from training.efficiency import StepTimes


def times(data, compute, exchange, steps=10):
    return StepTimes(data, compute, exchange, steps)


@pytest.mark.parametrize("parts, label", [
    ((6.0, 3.0, 1.0), eff.INPUT),  # the loader keeps the model waiting 60% of the time
    ((0.5, 3.0, 6.5), eff.EXCHANGE),  # the all-reduce
    ((0.5, 9.0, 0.5), eff.COMPUTE),  # both waits small
    ((1.4, 8.6, 0.0), eff.COMPUTE),  # 14% data wait: under the threshold
    ((1.5, 8.5, 0.0), eff.INPUT),  # 15%: at it
    ((2.0, 5.0, 3.0), eff.EXCHANGE),  # both over: the larger wins
    ((3.0, 5.0, 2.0), eff.INPUT),
    ((0.5, 9.5, None), eff.STEP),  # exchange not separated from compute
    ((5.0, 5.0, None), eff.INPUT),
])
def test_classify(parts, label):
    bound = eff.classify(times(*parts))
    assert bound.label == label
    measured = [s for s in bound.shares.values() if s is not None]
    assert sum(measured) == pytest.approx(1.0)


def test_classify_without_timings_is_unknown():
    assert eff.classify(None).label == eff.UNKNOWN
    assert eff.classify(StepTimes()).label == eff.UNKNOWN  # no step yet
    assert "unknown" in eff.classify(None).text()


def test_window_since_a_copy():
    run = StepTimes()
    run.add(1.0, 2.0, 0.5)
    before = run.copy()
    run.add(3.0, 1.0, 0.25)
    assert run.since(before) == StepTimes(3.0, 1.0, 0.25, 1)
    run.add(0.0, 1.0, None)  # a step whose exchange is not measured makes the whole sum's exchange unknown
    assert run.exchange is None and run.since(before).exchange is None


MEASURED = eff.Recipe("pytorch", "ddp", True, "bf16", 256)  # the recipe of ND H100 v5's 5,155 (docs/training.md)


def test_expectation_applies_on_a_gpu_at_the_benchmark_size_only():
    assert eff.expectation(5155, device="gpu", image_size=224, recipe=MEASURED).img_per_sec == 5155
    cpu = eff.expectation(5155, device="cpu", image_size=224, recipe=MEASURED)
    assert cpu.img_per_sec is None and "CPU" in cpu.basis
    assert eff.expectation(5155, device="gpu", image_size=128, recipe=MEASURED).img_per_sec is None
    assert eff.expectation(0, device="gpu", image_size=224, recipe=MEASURED).img_per_sec is None


def test_a_runs_recipe_names_its_optimizer_compile_mode_and_loader():
    from training.config import TrainConfig

    ours = eff.Recipe.of(TrainConfig(dist="ddp", compile=True, precision="bf16", batch_size=256, optimizer="sgd"))
    assert ours == MEASURED
    folder = eff.Recipe.of(TrainConfig(dist="ddp", compile=True, compile_mode="reduce-overhead", precision="bf16",
                                       batch_size=256, optimizer="lars", data="/data/imagenet", loader="nvjpeg"))
    assert (folder.optimizer, folder.compile_mode, folder.loader) == ("lars", "reduce-overhead", "nvjpeg")


def test_the_expectation_is_per_recipe_and_names_the_nearest_measured_one():
    """The default GPU run (Horovod, eager, batch 192) is not held to the figure DDP + compile at 256 reached."""
    default = eff.Recipe("pytorch", "horovod", False, "bf16", 192)
    expected = eff.expectation(5155, device="gpu", image_size=224, recipe=default)
    assert expected.img_per_sec is None and expected.unknown == "unknown for this recipe"
    assert expected.basis == ("unknown for this recipe (pytorch, horovod, eager, bf16, batch 192, 224 px, sgd, "
                              "synthetic data); the nearest measured: pytorch, ddp, compiled (default), bf16, batch "
                              "256, 224 px, sgd, synthetic data at 5155 img/s")
    # the optimizer, the compile mode and the loader are the recipe too (LARS's step, CUDA graphs, the input path)
    for other in (dataclasses.replace(MEASURED, batch=192), dataclasses.replace(MEASURED, compiled=False),
                  dataclasses.replace(MEASURED, precision="fp16"), dataclasses.replace(MEASURED, framework="keras"),
                  dataclasses.replace(MEASURED, optimizer="lars"),
                  dataclasses.replace(MEASURED, compile_mode="reduce-overhead"),
                  dataclasses.replace(MEASURED, loader="nvjpeg")):
        assert eff.expectation(5155, device="gpu", image_size=224, recipe=other).img_per_sec is None, other
    assert eff.expectation(5155, device="gpu", image_size=224).img_per_sec is None  # no recipe: not comparable
    assert eff.nearest_measured(default) == MEASURED
    # the progress line says so, `infra status` reads it back and prices no shortfall
    line = eff.progress_text(3000.0, expected, eff.classify(times(0.5, 9.0, 0.5)))
    assert "(expected unknown for this recipe)" in line
    reading = eff.parse_progress(f"step 10/90  {line}")
    assert reading.expected is None and reading.unknown == "unknown for this recipe"
    assert "expected unknown for this recipe" in eff.status_text(reading, 2, 98.32)
    assert "$" not in eff.status_text(reading, 2, 98.32)


def test_a_resolved_configs_recipe():
    from training.config import TrainConfig, resolve_for_device, resolve_optimizer

    cfg = resolve_for_device(TrainConfig(dist="ddp", compile=True, batch_size=256), gpu=True)
    assert eff.Recipe.of(resolve_optimizer(cfg, 256)) == MEASURED  # as the runner asks: the optimizer resolved
    assert eff.Recipe.of(resolve_for_device(TrainConfig(), gpu=True)) != MEASURED  # the default: horovod, eager


def test_progress_text_reads_back():
    bound = eff.classify(times(6.0, 3.0, 1.0))
    known = eff.progress_text(3896.0, eff.Expectation(5155.0, "bench"), bound)
    assert known == "3896.0 img/s per worker (0.76 of 5155 expected), input-bound (data 60%, compute 30%, exchange 10%)"
    unknown = eff.progress_text(12.5, eff.Expectation(None, "cpu"), eff.classify(times(0.1, 9.0, None)))
    stdout = f"step 10/20  loss 6.9  lr 0.1  50.0 img/s  {known}\nother\nstep 20/20  loss 6.8  lr 0.1  {unknown}\n"
    reading = eff.parse_progress(stdout)
    assert reading == eff.Reading(12.5, None, None,
                                  "compute+exchange-bound (data 1%, compute 99%, exchange in compute)", "unknown")
    assert eff.parse_progress(stdout.split("other")[0]) == eff.Reading(3896.0, 0.76, 5155.0, bound.text())
    assert eff.parse_progress("training ResNet50 ...\n") is None


def test_shortfall_cost():
    assert eff.shortfall_per_hour(0.75, 2, 98.32) == pytest.approx(49.16)
    assert eff.shortfall_per_hour(1.1, 2, 98.32) == 0.0  # above the expectation costs nothing


def test_status_text():
    reading = eff.Reading(3875.0, 0.75, 5155.0, "input-bound (data 22%, compute 74%, exchange 4%)")
    assert eff.status_text(reading, 2, 98.32) == ("3875 img/s per GPU, 0.75 of the size's 5155, input-bound (data 22%, "
                                                  "compute 74%, exchange 4%); the shortfall costs $49.16/h of 2 node(s) "
                                                  "at $98.32/h")
    unknown = eff.Reading(2.5, None, None, "exchange-bound (data 0%, compute 43%, exchange 57%)")
    assert "expected unknown" in eff.status_text(unknown, 1, 27.2) and "$" not in eff.status_text(unknown, 1, 27.2)
    assert eff.status_text(None, 1, 27.2) == "no progress line yet"


def test_summary_fields():
    fields = eff.summary_fields(3896.0, eff.Expectation(5155.0, "bench"), eff.classify(times(6.0, 3.0, 1.0)))
    assert fields["efficiency"]["of_expected"] == 0.756
    assert fields["efficiency"]["bound"] == eff.INPUT
    assert fields["efficiency"]["time_shares"] == {"data": 0.6, "compute": 0.3, "exchange": 0.1}


def test_expectation_args():
    assert eff.expectation_args(["--steps", "9"], framework="pytorch", expected=5155.0) == \
        ["--steps", "9", eff.FLAG, "5155"]
    assert eff.expectation_args([], framework="tensorflow", expected=5155.0) == []  # measured for PyTorch only
    assert eff.expectation_args([], framework="pytorch", expected=None) == []
    assert eff.expectation_args([eff.FLAG, "10"], framework="pytorch", expected=5155.0) == [eff.FLAG, "10"]
    assert eff.expectation_args([f"{eff.FLAG}=10"], framework="pytorch", expected=5155.0) == [f"{eff.FLAG}=10"]


class FakeStream:
    """A GPU stream's clock for CUDA events: work queued at host time t starts when the stream is free and the event
    after it completes when the work before it is done; query() reads the GPU's progress at the host's `now`."""

    def __init__(self):
        self.free_at = 0.0  # when the stream finishes what is queued
        self.now = 0.0  # the host's clock

    def queue(self, seconds: float) -> None:
        self.free_at = max(self.free_at, self.now) + seconds

    def event(self):
        stream = self

        class Event:
            def record(self):
                self.at = max(stream.free_at, stream.now)  # completes when the stream reaches it

            def query(self):
                return stream.now >= self.at

            def elapsed_time(self, later):
                return (later.at - self.at) * 1000

        return Event()


def test_the_gpus_idle_time_between_steps_is_read_from_completed_events_only():
    stream = FakeStream()
    idle = eff.GpuIdle(stream.event)
    idle.began()
    stream.queue(0.1)  # step 1: 100 ms of kernels, queued at once (the host runs ahead)
    idle.ended()
    stream.now = 0.01  # the host is back for step 2 long before the GPU is done: no idle
    idle.began()
    stream.queue(0.1)
    idle.ended()
    assert idle.collect() == 0.0  # step 2's first event has not completed yet: nothing read, nothing waited for
    stream.now = 0.25  # the host comes back 50 ms after the GPU went idle (its input was late)
    idle.began()
    stream.queue(0.1)
    idle.ended()
    # the gap before step 2 (none) and before step 3 (50 ms: the stream was idle, so step 3's event completed at once)
    assert idle.collect() == pytest.approx(0.05)
    assert idle.collect() == 0.0  # each gap is read once


def test_where_the_gpus_idle_is_measured_it_decides_input_bound_not_the_hosts_wait():
    host_waits = StepTimes(data=2.0, compute=8.0, exchange=None, steps=10)  # 20% host-side data wait
    assert eff.classify(host_waits).label == eff.INPUT  # host-side only: reads input-bound
    busy_gpu = dataclasses.replace(host_waits, gpu_idle=0.1)  # but the GPU idled 1%: the host ran ahead
    bound = eff.classify(busy_gpu)
    assert bound.label == eff.STEP and bound.text().endswith("gpu idle 1%)")
    starved = dataclasses.replace(host_waits, data=0.2, gpu_idle=3.0)  # little host wait, the GPU starved 30%
    assert eff.classify(starved).label == eff.INPUT
    run = StepTimes()
    run.add_gpu_idle(1.0)
    before = run.copy()
    run.add_gpu_idle(0.5)
    assert run.since(before).gpu_idle == 0.5 and StepTimes().since(StepTimes()).gpu_idle is None


def test_a_recipe_measured_beside_the_sizes_figure_expects_its_share_of_it(monkeypatch):
    lars = dataclasses.replace(MEASURED, optimizer="lars")
    assert eff.expectation(5363, device="gpu", image_size=224, recipe=lars).img_per_sec is None  # not measured
    monkeypatch.setitem(eff.MEASURED_RECIPES, lars, 0.9)  # as a device run would add it
    expected = eff.expectation(5363, device="gpu", image_size=224, recipe=lars)
    assert expected.img_per_sec == pytest.approx(4826.7) and expected.basis.startswith(
        "0.90 x the node size's benchmark of 5363, as measured beside it (pytorch, ddp, compiled (default), bf16, "
        "batch 256, 224 px, lars, synthetic data)")
