"""The Pulumi program (one ComponentResource per module) and the deployer-side CLI (`python -m infra`)."""
