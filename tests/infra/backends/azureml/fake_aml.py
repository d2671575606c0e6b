"""The one fake of Azure ML's jobs and models, at the AmlJobs seam (infra/backends/azureml/service.py)."""
import json

from infra.backends.shared import JobNotFound


class FakeAmlJobs:
    """Azure ML's jobs and models as the seam sees them; `finish(name)` plays a job that completed and wrote its
    run folder (summary.json, model.onnx) under the `run` output, as `jobs.download(all=True)` lays it out.
    `nodes[compute]`: how many nodes a compute cluster holds now (count_nodes); `max_instances[compute]`: its
    maxNodeCount (max_nodes)."""

    def __init__(self):
        self.jobs, self.calls, self.models, self.nodes = {}, [], {}, {}
        self.max_instances: dict[str, int] = {}  # compute -> its maxNodeCount now (max_nodes); unset: not known
        self.clusters: dict[str, dict] = {}  # compute -> its AmlCompute properties (cluster_state); unset: at rest

    def submit(self, job):
        self.calls.append(("submit", job.name))
        self.jobs[job.name] = {"name": job.name, "status": "Queued", "created": f"2026-11-22T10:{len(self.jobs):02d}",
                               "studio_url": f"https://ml.azure.com/runs/{job.name}", "job": job}
        return job.name

    def get(self, name):
        if name not in self.jobs:
            raise JobNotFound(name)
        return {k: v for k, v in self.jobs[name].items() if k != "job"}

    def list_jobs(self, prefix):
        return sorted((self.get(n) for n in self.jobs if n.startswith(prefix)), key=lambda j: j["created"],
                      reverse=True)

    def stream(self, name):
        self.calls.append(("stream", name))

    def download(self, name, dest):
        self.calls.append(("download", name))
        run = dest / "named-outputs" / "run"
        run.mkdir(parents=True, exist_ok=True)
        (run / "summary.json").write_text(json.dumps(self.jobs[name].get("summary", {})))
        (run / "model.onnx").write_bytes(b"onnx")

    def cancel(self, name):
        self.calls.append(("cancel", name))
        self.jobs[name]["status"] = "Canceled"

    def register_model(self, name, job_name, tags):
        self.calls.append(("register", name, job_name))
        self.models.setdefault(name, []).append(tags)
        return str(len(self.models[name]))

    def count_nodes(self, compute):
        self.calls.append(("count_nodes", compute))
        return self.nodes[compute]

    def max_nodes(self, compute):
        return self.max_instances.get(compute)

    def cluster_state(self, compute):
        """A cluster at rest (Compute - Get's AmlCompute properties): Steady, no nodes, no errors."""
        return self.clusters.get(compute, {"allocationState": "Steady", "currentNodeCount": 0, "targetNodeCount": 0,
                                           "errors": None})

    def finish(self, name, summary):
        self.jobs[name].update(status="Completed", summary=summary)
