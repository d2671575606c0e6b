"""The one fake: an in-memory `infra.dataplane.batch.BatchService`, recording what was asked of it."""
from infra.dataplane.batch import JobNotFound


class FakeBatch:
    def __init__(self):
        self.jobs: dict[str, dict] = {}
        self.tasks: dict[str, dict] = {}
        self.files: dict[tuple[str, str], bytes] = {}
        self.calls: list[tuple] = []

    def submit(self, job, task):
        self.calls.append(("submit", job["id"]))
        if job["id"] in self.jobs:
            raise RuntimeError(f"JobExists: {job['id']}")
        self.jobs[job["id"]] = {**job, "state": "active", "creationTime": f"2026-11-21T12:00:{len(self.jobs):02d}Z"}
        self.tasks[job["id"]] = {**task, "state": "active"}

    def get_job(self, job_id):
        if job_id not in self.jobs:
            raise JobNotFound(job_id)
        return self.jobs[job_id]

    def get_task(self, job_id, task_id):
        if job_id not in self.tasks:
            raise JobNotFound(job_id)
        return self.tasks[job_id]

    def list_jobs(self, prefix):
        jobs = [j for i, j in self.jobs.items() if i.startswith(prefix)]
        return sorted(jobs, key=lambda j: j["creationTime"], reverse=True)

    def read_task_file(self, job_id, task_id, path, offset):
        self.calls.append(("read", job_id, path, offset))
        return self.files.get((job_id, path), b"")[offset:]

    def terminate(self, job_id):
        self.calls.append(("terminate", job_id))
        if job_id not in self.jobs:
            raise JobNotFound(job_id)
        self.jobs[job_id]["state"] = "completed"

    def delete(self, job_id):
        self.calls.append(("delete", job_id))
        self.jobs.pop(job_id, None)
        self.tasks.pop(job_id, None)
