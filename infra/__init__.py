"""The deployer's side: the Pulumi program and `python -m infra`.

  core/        pure logic the rest shares (config, GPU catalog, costs, Batch job spec, NFS user data, security
               checks); imports no Pulumi component and no Azure client
  components/  one Pulumi ComponentResource per module, and the TrainingJob dynamic resource
  dataplane/   the seams to Azure's data planes (Batch jobs, the staging report blob), replaceable in tests
  cli/         `python -m infra`: plan and the job verbs
  preview/     the program evaluated offline under Pulumi's mocks (plan, tests, rehearsal)
  policy/      the CrossGuard policy pack over core/security.py
"""
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent  # the project: Pulumi.yaml, stack files, training/, .cache/
