"""A stack for the pipeline's identity (`new-team --ci`), and `plan` / `preflight` refusing a deployerPrincipalType
that is not who signs in to run `up` (infra/core/security/deployer_identity.py)."""
import base64
import json
import shutil

import pytest

from infra import REPO_ROOT
from infra.cli.main import main
from infra.core.config import stack as config
from infra.core.security import deployer_identity
from infra.core.security.deployer_identity import SERVICE_PRINCIPAL, USER
from tests.infra.cli.test_preflight import arm, clients, project  # noqa: F401 - fixtures, the ARM endpoint's client

PIPELINE = {"ARM_USE_OIDC": "true", "ARM_CLIENT_ID": "00000000-0000-0000-0000-0000000000d1",
            "ARM_TENANT_ID": "00000000-0000-0000-0000-0000000000aa"}  # .github/workflows/fleet-deploy.yml's `up` job


def jwt(**claims):
    part = lambda data: base64.urlsafe_b64encode(json.dumps(data).encode()).decode().rstrip("=")  # noqa: E731
    return f"{part({'typ': 'JWT', 'alg': 'RS256'})}.{part(claims)}.c2lnbmF0dXJl"


@pytest.fixture
def fleet(tmp_path):
    root = tmp_path / "fleet"
    root.mkdir()
    shutil.copy(REPO_ROOT / "Pulumi.yaml", root)
    for stack in config.stack_names():
        shutil.copy(REPO_ROOT / f"Pulumi.{stack}.yaml", root)
    return root


def test_new_team_ci_writes_a_stack_for_the_pipelines_identity(fleet, capsys):
    assert main(["new-team", "team31", "--ci", "--project-dir", str(fleet)]) == 0
    out = capsys.readouterr().out
    text = (fleet / "Pulumi.team31.yaml").read_text()
    assert "azure-dl-training:deployerPrincipalType: ServicePrincipal" in text and "new-team team31 --from trial --ci" \
        in text
    assert config.from_stack_file("team31", fleet).deployer_principal_type == SERVICE_PRINCIPAL
    assert "next (the pipeline deploys it: docs/ci.md):" in out and "python -m infra ci-roles --subscription" in out
    assert "pulumi stack init" not in out  # the pipeline's `pulumi stack select --create` does it
    assert "the deploy run's artifact member-team31" in out  # fleet-deploy writes the member file
    assert main(["new-team", "team32", "--project-dir", str(fleet)]) == 0  # without --ci: as the template (a person)
    assert config.from_stack_file("team32", fleet).deployer_principal_type == USER


def test_plan_under_the_pipelines_sign_in_refuses_a_user_stack_in_one_line(fleet, monkeypatch, capsys):
    for name, value in PIPELINE.items():
        monkeypatch.setenv(name, value)
    assert main(["plan", "--stack", "trial", "--project-dir", str(fleet)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(
        "error: Pulumi.trial.yaml: deployerPrincipalType is User, but `pulumi up` here signs in as a ServicePrincipal "
        "(ARM_CLIENT_ID with ARM_USE_OIDC (OIDC): the azure-native provider signs in as it)")
    assert "set deployerPrincipalType: ServicePrincipal" in err and "new-team NAME --ci" in err


@pytest.mark.parametrize("env,found", [
    (PIPELINE, SERVICE_PRINCIPAL),
    ({"ARM_CLIENT_ID": "x", "ARM_CLIENT_SECRET": "s"}, SERVICE_PRINCIPAL),
    ({"ARM_CLIENT_ID": "x", "ARM_USE_MSI": "true"}, SERVICE_PRINCIPAL),
    ({"ARM_CLIENT_ID": "x"}, None),  # no way to sign in as it: the provider falls back to the Azure CLI
    ({"ARM_USE_OIDC": "true"}, None), ({}, None),
])
def test_the_providers_sign_in_is_read_from_its_arm_variables(env, found):
    told = deployer_identity.from_provider_environment(env)
    assert (told[0] if told else None) == found


@pytest.mark.parametrize("claims,found", [
    ({"idtyp": "app", "roles": []}, SERVICE_PRINCIPAL), ({"idtyp": "user", "scp": "user_impersonation"}, USER),
    ({"scp": "user_impersonation", "upn": "a@b"}, USER),  # no idtyp (an optional claim): delegated scopes
    ({"oid": "x", "appid": "y"}, SERVICE_PRINCIPAL),  # an app-only token (a managed identity's too)
])
def test_the_signed_in_type_is_read_from_the_tokens_claims(claims, found):
    assert deployer_identity.from_token(jwt(**claims)) == found
    assert deployer_identity.from_token("test-token") is None  # not a JWT: nothing said


class _AsServicePrincipal:
    def get_token(self, *scopes, **kwargs):
        from azure.core.credentials import AccessToken

        return AccessToken(jwt(idtyp="app", oid="deploy"), 2**40)

    def get_token_info(self, *scopes, options=None):
        from azure.core.credentials import AccessTokenInfo

        return AccessTokenInfo(jwt(idtyp="app", oid="deploy"), 2**40)


def test_preflight_as_a_service_principal_fails_a_user_stack(arm, project, capsys):  # noqa: F811
    from infra.backends import preflight

    def services():
        _, prices = clients(arm)
        return preflight.Arm(_AsServicePrincipal(), base_url=arm.url, connection_verify=arm.ca_file,
                             retry_total=0), prices

    argv = ["preflight", "--stack", "dev", "--project-dir", str(project)]
    assert main(argv, preflight_services=services) == 1
    out = capsys.readouterr().out
    assert "\nFAIL deployer: Pulumi.dev.yaml: deployerPrincipalType is User, but `pulumi up` here signs in as a " \
           "ServicePrincipal (this sign-in's token)" in out
    assert "would stop `pulumi up` or the first job (deployer)" in out
    stack = project / "Pulumi.dev.yaml"
    stack.write_text(stack.read_text() + "  azure-dl-training:deployerPrincipalType: ServicePrincipal\n")
    assert main(argv, preflight_services=services) == 0
    assert "\nok   deployer: deployerPrincipalType ServicePrincipal: this sign-in is a ServicePrincipal" in \
           capsys.readouterr().out


def test_preflight_names_the_role_condition_a_new_stack_needs_and_who_updates_it(arm, project,  # noqa: F811
                                                                                  capsys):
    from infra.backends import preflight
    from infra.core.security import ci_roles
    from tests.infra.backends.arm_endpoint import SUBSCRIPTION, role_assignment

    stack = project / "Pulumi.dev.yaml"
    stack.write_text(stack.read_text() + "  azure-dl-training:deployerPrincipalType: ServicePrincipal\n")

    def services():
        _, prices = clients(arm)
        return preflight.Arm(_AsServicePrincipal(), base_url=arm.url, connection_verify=arm.ca_file,
                             retry_total=0), prices

    def holds(condition):
        held = role_assignment("deploy", deployer_identity.RBAC_ADMINISTRATOR, f"/subscriptions/{SUBSCRIPTION}")
        held["properties"].update(condition=condition, conditionVersion="2.0")
        arm.role_assignments[:] = [held]

    # the condition written before this stack existed: the other teams' custom roles, not dev's
    holds(ci_roles.condition(ci_roles.assignable(SUBSCRIPTION, [("nlp", "nlp"), ("trial", "trial")])))
    argv = ["preflight", "--stack", "dev", "--project-dir", str(project)]
    assert main(argv, preflight_services=services) == 1
    out = capsys.readouterr().out
    assert ("\nFAIL role condition: the deploy identity's Role Based Access Control Administrator condition does not "
            "admit Blob Data Writer (custom) of rg-dltrain-dev-dev, which `up` assigns: the subscription's Owner (or a "
            "User Access Administrator) runs `az role assignment update` on that assignment with the condition of "
            f"`python -m infra ci-roles --subscription {SUBSCRIPTION} --condition-only`") in out
    holds(ci_roles.condition(ci_roles.assignable(SUBSCRIPTION, [("dev", "dev"), ("nlp", "nlp")])))
    assert main(argv, preflight_services=services) == 0
    assert "\nok   role condition: the deploy identity's condition admits the " in capsys.readouterr().out


def test_a_folder_without_pulumi_yaml_is_one_line(tmp_path, capsys):
    shutil.copy(REPO_ROOT / "Pulumi.trial.yaml", tmp_path)  # stack files, but not the project's Pulumi.yaml
    assert main(["new-team", "team31", "--project-dir", str(tmp_path)]) == 2
    assert capsys.readouterr().err == (f"error: no Pulumi.yaml in {tmp_path}: run this from the project's folder (the "
                                       "checkout that holds Pulumi.yaml and the stack files)\n")
