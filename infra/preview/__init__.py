"""The program evaluated offline, before `up`: under Pulumi's mocks (`offline`), for `plan`, the tests and the
rehearsal; every private Pulumi runtime name it needs is behind `pulumi_private`, which
tests/infra/preview/test_pulumi_private.py checks for each Pulumi version the requirements pin. What each resource
type shows in `plan` and the checks applied to it live in infra/core/security/resources.py (RESOURCE_TYPES, apply_checks)."""
