"""MLflow tracking from rank 0, beside metrics.jsonl and TensorBoard (which are always written).

On when `--mlflow` is given, or when MLFLOW_TRACKING_URI is set: Azure ML sets it in every job, with
MLFLOW_RUN_ID naming the job's own run, so a job's metrics appear in the studio
(https://learn.microsoft.com/azure/machine-learning/how-to-use-mlflow-configure-tracking; the images carry
azureml-mlflow for its azureml:// URIs). Without MLFLOW_TRACKING_URI, `--mlflow` logs to a local store in
OUTPUT_DIR/mlruns, so the same metrics view works before anything is deployed. The training environments carry
mlflow-skinny (the client); `mlflow ui` needs the full package (its server: Flask, uvicorn), in a venv of its own at
the same version: `python3 -m venv .venv-mlflow && .venv-mlflow/bin/pip install mlflow==3.15.0`, then
`MLFLOW_ALLOW_FILE_STORE=true .venv-mlflow/bin/mlflow ui --backend-store-uri OUTPUT_DIR/mlruns` (README).
Logged: the run's settings as params, loss, LR and img/s at every logged step, val_loss and val_top1 at every
validation, the summary's numbers at the end, and summary.json and report.png as artifacts.
"""
from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from training.errors import UsageError

EXPERIMENT = "dltrain"
ALLOW_FILE_STORE = "MLFLOW_ALLOW_FILE_STORE"  # for local stores; under Azure ML the job's own experiment and run are used


def tracking_uri(enabled: bool, output_dir: str, env: Mapping[str, str] = os.environ) -> str | None:
    """Where to log, or None for no MLflow."""
    if env.get("MLFLOW_TRACKING_URI"):
        return env["MLFLOW_TRACKING_URI"]
    if enabled:
        return (Path(output_dir) / "mlruns").resolve().as_uri()
    return None


PINNED_IN = Path(__file__).parent / "requirements-torch.txt"  # the images' pin, which the local environment leaves out


def client_pin(requirements: Path = PINNED_IN) -> str:
    """`mlflow-skinny==VERSION` as the training images pin it."""
    for line in requirements.read_text().splitlines():
        if line.strip().startswith("mlflow-skinny=="):
            return line.split("#")[0].strip()
    return "mlflow-skinny"


def require_client(wanted: bool) -> None:
    """With --mlflow (or MLFLOW_TRACKING_URI), refuse at once a Python without MLflow's client, naming the exact
    install for this Python (README's local environment leaves it out: training/requirements-local.txt)."""
    if not wanted:
        return
    import importlib.util

    if importlib.util.find_spec("mlflow") is None:
        raise UsageError(f"--mlflow: MLflow's client is not installed in this Python ({sys.executable}): run "
                         f"`{sys.executable} -m pip install {client_pin()}` (the training images' pin), or leave "
                         "--mlflow out (metrics.jsonl, TensorBoard and report.png are written anyway)")


class Tracker:
    def __init__(self, uri: str, params: dict[str, Any], env: Mapping[str, str] = os.environ):
        require_client(True)
        import mlflow

        self.mlflow = mlflow
        if uri.startswith("file:"):
            # MLflow 3.15 refuses its file store unless told (its database store needs SQLAlchemy, which
            # mlflow-skinny leaves out); the local store here is one run's folder, which the file store serves well.
            os.environ.setdefault(ALLOW_FILE_STORE, "true")
        mlflow.set_tracking_uri(uri)
        if not env.get("MLFLOW_RUN_ID"):  # Azure ML names the run; elsewhere a run of our experiment
            mlflow.set_experiment(EXPERIMENT)
        self.run = mlflow.start_run()
        mlflow.log_params({key: str(value) for key, value in params.items()})

    def log_step(self, step: int, values: dict[str, float]) -> None:
        self.mlflow.log_metrics(values, step=step)

    def finish(self, summary: dict[str, Any], files: list[Path]) -> None:
        numbers = {key: float(value) for key, value in summary.items()
                   if isinstance(value, (int, float)) and not isinstance(value, bool)}
        self.mlflow.log_metrics({f"final/{key}": value for key, value in numbers.items()})
        for file in files:
            if file.is_file():
                self.mlflow.log_artifact(str(file))
        self.mlflow.end_run()
