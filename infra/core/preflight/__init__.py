"""Preflight's verdicts on Azure's answers: the verdict (check), subscription, Azure Policy, registry, image."""
