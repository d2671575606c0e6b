"""CrossGuard policy pack: `pulumi preview --policy-pack infra/policy` (or `pulumi up --policy-pack ...`)."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the pack runs from its own folder

from pulumi_policy import PolicyPack  # noqa: E402

from infra.policy.pack import PACK_NAME, policies  # noqa: E402

PolicyPack(name=PACK_NAME, policies=policies())
