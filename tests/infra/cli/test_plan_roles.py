"""plan's "Before `pulumi up`" names the roles a user of the stack needs as the grants `up` makes name them
(issue 39: it named Storage Blob Data Contributor and Azure Batch Data Contributor while `up` granted others)."""
import pytest

from infra.backends import backend
from infra.components.access import team_grants
from infra.components.roles import ROLE_NAMES
from infra.core.config import stack as config
from tests.infra.conftest import STACKS


@pytest.mark.parametrize("stack", STACKS)
def test_before_up_names_exactly_the_roles_up_grants_the_team(stack):
    cfg = config.from_stack_file(stack)
    chosen = backend(cfg.backend)
    [line] = [line for line in chosen.before_up(cfg) if "an Azure AD identity needs" in line]
    listed = line.split("(teamMembers, teamAdmins): ", 1)[1].split("; without", 1)[0].split("; ")
    named = {part.split(" on ", 1)[0] for part in listed}
    granted = {ROLE_NAMES[grant.role] for grant in team_grants("members", chosen.team_grants(cfg, "members"))}
    assert named == granted, line
