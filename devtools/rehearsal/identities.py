"""Who signs in at the rehearsal (devtools/rehearsal/run.py) and how: the deployer and a team member as the
rehearsal's Azure AD issues their tokens, the Batch endpoint's check of those tokens, the endpoint file the verbs of
other shells read, and the rehearsal's own azure-batch client signed in as the deployer."""
from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path

from infra.backends.shared import REHEARSAL_FILE

# The deployer, as the job verbs sign in at the rehearsal: a managed identity of the rehearsal's Azure AD (the
# token endpoint serves only the identities it knows), with the roles docs/deploying.md gives the deployer: Storage
# Blob Data Contributor on the account and a Batch role on the Batch account.
DEPLOYER_CLIENT_ID = "00000000-0000-4000-8000-00000000de91"
DEPLOYER = "rehearsal-deployer"


def grant_deployer(account, containers: list[str]) -> None:
    from devtools.rehearsal.storage import Grant

    account.grants += [Grant(DEPLOYER, container, "racwdl") for container in containers]


def deployer_token(ad):
    """The Batch endpoint's check of a bearer token: one the rehearsal's Azure AD issued to the deployer."""
    return lambda token: ad.tokens.get(token) == DEPLOYER


# A team member, as docs/jobs.md has one: a user in the stack's teamMembers group, signed in at the rehearsal's
# Azure AD (the group's token: Azure AD grants a member what their groups are granted). The rehearsal adds the group
# to the stack's teamMembers (rehearsed_config), so the program declares the members' grants
# (infra/components/access.py, the backend's team_grants) and storage and Batch honour exactly those.
MEMBER_CLIENT_ID = "00000000-0000-4000-8000-0000000e0b01"
MEMBER_GROUP = "0000000a-0000-4000-8000-0000000e0b01"
PEOPLE = {DEPLOYER_CLIENT_ID: DEPLOYER, MEMBER_CLIENT_ID: MEMBER_GROUP}  # client ID -> principal, for AzureAd


def rehearsed_config(stack: str):
    """The stack file's config, with the rehearsal's member group in teamMembers (when not there already)."""
    from infra.core.config import stack as config

    cfg = config.from_stack_file(stack)
    if MEMBER_GROUP in cfg.access.members:
        return cfg
    return dataclasses.replace(cfg, access=dataclasses.replace(cfg.access, members=(*cfg.access.members, MEMBER_GROUP)))


def batch_token(ad, ev, node_operators: set[str] = frozenset()):
    """The Batch endpoint's check of a bearer token: one the rehearsal's Azure AD issued to the deployer, or to a
    principal the program grants Azure Batch Job Submitter on the Batch account (the team's members), or to one in
    `node_operators` (read at each request: RehearsalBatch.node_operators)."""
    from infra.core.security.role_ids import BATCH_JOB_SUBMITTER, role_key

    account = ev.one("azure-native:batch:BatchAccount").state["id"]
    submitters = {str(a.inputs["principalId"]) for a in ev.of_type("azure-native:authorization:RoleAssignment")
                  if str(a.inputs.get("scope", "")) == account
                  and role_key(str(a.inputs.get("roleDefinitionId", "")), account) == BATCH_JOB_SUBMITTER}
    deployer = deployer_token(ad)
    return lambda token: deployer(token) or ad.tokens.get(token) in submitters or ad.tokens.get(token) in node_operators


def write_endpoints(work: Path, ev, batch_url: str, ad) -> dict[str, str]:
    """REHEARSAL_FILE (infra/backends/shared.py): the stack's outputs with the local endpoints (no SAS: the verbs
    sign in) and the sign-in environment, mode 0600 from its creation (the header secret is a credential).
    Returns the environment."""
    outputs = {key: value for key, value in ev.outputs.items() if key != "sas"}
    outputs["batchAccountEndpoint"] = batch_url
    outputs["containerUrls"] = {name: ad.container_url(url) for name, url in ev.outputs["containerUrls"].items()}
    env = {**ad.env(), "AZURE_CLIENT_ID": DEPLOYER_CLIENT_ID}
    partial = work / f".{REHEARSAL_FILE}.partial"
    partial.unlink(missing_ok=True)
    with os.fdopen(os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "w") as f:
        json.dump({"pid": os.getpid(), "outputs": outputs, "env": env}, f, indent=1, default=str)
    partial.replace(work / REHEARSAL_FILE)
    return env


class DeployerToken:
    """The deployer's token from the rehearsal's managed identity endpoint, asked as ManagedIdentityCredential asks
    it in the verbs' own processes (App Service protocol: GET ?api-version=2019-08-01&resource=...&client_id=...,
    header X-IDENTITY-HEADER). This process does not take the verbs' environment: azure-identity reads it at each
    token request, and the rehearsal may run inside a test's process."""

    def __init__(self, env: dict[str, str]):
        self.env = env

    def get_token(self, *scopes, **kwargs):
        import urllib.parse
        import urllib.request

        from azure.core.credentials import AccessToken

        query = urllib.parse.urlencode({"api-version": "2019-08-01", "resource": scopes[0].removesuffix("/.default"),
                                        "client_id": self.env["AZURE_CLIENT_ID"]})
        request = urllib.request.Request(f"{self.env['IDENTITY_ENDPOINT']}?{query}",
                                         headers={"X-IDENTITY-HEADER": self.env["IDENTITY_HEADER"]})
        with urllib.request.urlopen(request, timeout=30) as response:
            body = json.loads(response.read())
        return AccessToken(body["access_token"], int(body["expires_on"]))


def batch_client(url: str, env: dict[str, str]):
    """The rehearsal's own AzureBatch (its submit, its status): the real azure-batch client, signed in as the
    deployer at the rehearsal's token endpoint, trusting the rehearsal's CA."""
    from azure.batch import BatchClient

    from infra.backends.batch.service import CLIENT_OPTIONS, AzureBatch

    return AzureBatch(url, client=BatchClient(url, DeployerToken(env), connection_verify=env["REQUESTS_CA_BUNDLE"],
                                              **CLIENT_OPTIONS))
