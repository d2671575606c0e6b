"""The ACR token password dynamic provider against a fake ARM client (the one seam)."""
import pytest

from infra.components.acr_token import TokenPasswordProvider

PROPS = {"registry_id": "/subscriptions/s/resourceGroups/rg/providers/Microsoft.ContainerRegistry/registries/cr",
         "token_id": "/subscriptions/s/.../tokens/training-image-push", "expiry": "2027-01-01T00:00:00Z",
         "username": None, "password": None}


class FakeArm:
    def __init__(self, response):
        self.response, self.calls = response, []

    def post(self, path, body):
        self.calls.append((path, body))
        return self.response


def test_create_generates_password1_for_the_token():
    arm = FakeArm({"username": "training-image-push",
                   "passwords": [{"name": "password1", "value": "s3cret"}, {"name": "password2", "value": "x"}]})
    result = TokenPasswordProvider(arm).create(PROPS)
    assert arm.calls == [(f"{PROPS['registry_id']}/generateCredentials",
                          {"tokenId": PROPS["token_id"], "name": "password1", "expiry": PROPS["expiry"]})]
    assert result.outs["password"] == "s3cret" and result.outs["username"] == "training-image-push"
    assert result.id == f"{PROPS['token_id']}/password1"


def test_create_without_a_password_fails_clearly():
    with pytest.raises(RuntimeError, match="no password1"):
        TokenPasswordProvider(FakeArm({"passwords": []})).create(PROPS)


def test_diff_replaces_on_new_token_or_expiry_only():
    provider = TokenPasswordProvider(FakeArm({}))
    assert provider.diff("id", PROPS, dict(PROPS)).changes is False
    diff = provider.diff("id", PROPS, {**PROPS, "expiry": "2027-02-01T00:00:00Z"})
    assert diff.changes is True and diff.replaces == ["expiry"]
