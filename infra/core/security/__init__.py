"""Security rules: each resource type's checks (resources), own settings (invariants), roles, SAS, firewalls."""
