"""The deployer's side: the Pulumi program and `python -m infra`. Floors, from the ground up: each imports only the
floors above it in this list (tests/infra/test_layers.py holds them, imports inside functions included).

  core/        pure logic the rest shares (config, GPU catalog, costs, NFS user data, security checks); imports
               no Pulumi component and no Azure client
  components/  one Pulumi ComponentResource per module for what every stack has (network, storage, registry...)
  backends/    one package per backend (batch, azureml): its job spec, Pulumi component, job resource, data-plane
               client and job verbs; what both share beside them
  stack.py     the stack: the components every stack has, then the stack's backend, its access, budget and outputs
  preview/     the program evaluated offline under Pulumi's mocks (plan, tests, rehearsal); Pulumi's private names
  cli/         `python -m infra`: plan and the job verbs
  policy/      the CrossGuard policy pack over core/security/resources.py
"""
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent  # the project: Pulumi.yaml, stack files, training/, .cache/
