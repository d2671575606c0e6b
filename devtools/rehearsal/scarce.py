"""`python -m devtools rehearse --scarce`: the rehearsal's Batch account gets fewer nodes than the job asks for, as
ND-class capacity often does on Azure, and the job verbs meet it as they would there.

The pool stops at one node fewer than the job's (1 of 2 by default) with an AccountCoreQuotaReached entry in its
`resizeErrors` (devtools/rehearsal/batch_endpoint.py: ScarceCapacity, answers shaped by the Batch REST spec
2025-06-01). `play` then runs, through the real azure-batch client and our own verbs (infra/backends/batch/
operate.py, allocation.py):
1. `status` while the job waits: the pool holds 1 of 2, the resize error, the deadline, node-hours so far;
2. `status` past the deadline (allocationTimeoutMinutes after the job's creation);
3. `submit` past the deadline: it ends the waiting job (terminateReason AllocationTimeout), warns of the pool's
   quota error and queues the next job; with nothing left waiting the pool gives its node back;
4. `status` of the ended job (the reason, from the pool's resizeErrors) and Nodes - List: no node left;
5. the missing nodes come (late, within the new job's deadline): the new job trains as any rehearsal's does.

The rule that makes it fit in a rehearsal: nobody waits out the deadline. The verbs take the time they read the
deadline against as an argument (`now`), and the rehearsal gives them the time it would be 10 minutes after the
job's creation, then one minute past its deadline; the deadline itself (the job's creationTime and its
allocationTimeoutMinutes metadata, as the Batch endpoint stamped and stored them) and every decision are our
code's, unchanged. For the same reason `submit`'s minute of waiting after it ends a job (for the autoscale
formula's 30-second samples, allocation.SAMPLE_GAP_S) is noted, not slept: the rehearsal has no formula, its pool
gives the node back at once. The job `submit` queues past the deadline carries that later time in its ID.
"""
from __future__ import annotations

import contextlib
import io
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TextIO

from infra.backends.batch import allocation, operate

WAITING_MINUTES = 10  # when the first `status` is asked, after the job's creation
PAST_MINUTES = 1  # how far past the deadline the later `status` and `submit` are asked


class ScarceNotPlayed(RuntimeError):
    """A step of the partial allocation did not happen as Azure would make it happen: a defect of the rehearsal."""


@dataclass
class Scarce:
    ended: str  # the job that waited past its deadline and was ended
    job: str  # the job `submit` queued past the deadline, which the late nodes run
    lines: list[str] = field(default_factory=list)  # what the report says, one line a step


@contextlib.contextmanager
def _pauses_noted(noted: list[float]):
    """operate.pause (submit's wait for the formula's samples) records its seconds instead of sleeping."""
    previous = operate.pause
    operate.pause = noted.append
    try:
        yield
    finally:
        operate.pause = previous


def play(service, capacity, inputs, job: str, out: TextIO, verb_flags: str = "") -> Scarce:
    """Steps 1-5 above on `job`, just submitted to the pool that `capacity` (a ScarceCapacity) holds short; what
    the verbs print goes to `out`. Raises ScarceNotPlayed where a step's outcome is not the one Azure gives."""
    job_info = service.get_job(job)
    end = allocation.deadline(job_info)
    if end is None:
        raise ScarceNotPlayed(f"job {job} carries no allocation deadline ({allocation.DEADLINE_METADATA} metadata)")
    created = end - timedelta(minutes=allocation.deadline_minutes(job_info))
    past = end + timedelta(minutes=PAST_MINUTES)
    pool, nodes = service.pool_allocation(inputs.pool_id)
    have = int((pool or {}).get("currentDedicatedNodes") or 0)
    if have >= inputs.nodes:
        raise ScarceNotPlayed(f"the pool holds {have} node(s), enough for the job's {inputs.nodes}: nothing waits")
    lines = [f"the pool stopped at {have} of {inputs.nodes} node(s) (resizeErrors: "
             f"{allocation.resize_error(pool)}); job {job} waits, its deadline {end:%H:%M} UTC "
             f"({allocation.deadline_minutes(job_info)} minutes after its creation)"]

    waiting = operate.status(service, job, now=created + timedelta(minutes=WAITING_MINUTES)).allocation
    if not waiting.startswith("allocation: waiting for"):
        raise ScarceNotPlayed(f"`status` {WAITING_MINUTES} minutes in does not say the job waits: {waiting!r}")
    lines.append(f"`status` {WAITING_MINUTES} minutes in: {waiting}")
    overdue = operate.status(service, job, now=past).allocation
    if not overdue.startswith("allocation: past its deadline"):
        raise ScarceNotPlayed(f"`status` past the deadline does not say so: {overdue!r}")
    lines.append(f"`status` {PAST_MINUTES} minute past the deadline: {overdue}")

    said, noted = io.StringIO(), []
    with _pauses_noted(noted):
        newer = operate.submit(service, inputs, past, said, verb_flags=verb_flags)
    out.write(said.getvalue())
    if f"ended {job}:" not in said.getvalue():
        raise ScarceNotPlayed(f"`submit` past the deadline did not end {job}: {said.getvalue()!r}")
    lines.append(f"`submit` {PAST_MINUTES} minute past the deadline ended {job} and queued {newer}"
                 + (f" (its {noted[0]:.0f} s wait for the autoscale formula's samples not slept: no formula here)"
                    if noted else ""))
    warned = [line for line in said.getvalue().splitlines() if line.startswith("warning:")]
    lines += [f"`submit` said: {line}" for line in warned]

    ended = operate.status(service, job, now=past)
    reason = (service.get_job(job).get("executionInfo") or {}).get("terminateReason")
    if ended.job_state != "completed" or reason != allocation.TIMEOUT_REASON or not ended.allocation:
        raise ScarceNotPlayed(f"job {job} is {ended.job_state} ({reason}) after submit ended it: "
                              f"{ended.allocation!r}")
    lines.append(f"`status` of {job}: {ended.job_state}; {ended.allocation}")
    pool, nodes = service.pool_allocation(inputs.pool_id)
    left = int((pool or {}).get("currentDedicatedNodes") or 0) + int((pool or {}).get("currentLowPriorityNodes") or 0)
    if nodes or left:
        raise ScarceNotPlayed(f"the pool still holds {left} node(s) ({len(nodes)} listed) with nothing waiting")
    lines.append("the pool gave its node back: Nodes - List is empty, currentDedicatedNodes 0 (no node left)")

    capacity.arrive()  # late, but within the new job's own deadline (its creation + allocationTimeoutMinutes)
    lines.append(f"then the missing nodes came, within {newer}'s deadline: it runs as any rehearsal's job")
    return Scarce(job, newer, lines)
