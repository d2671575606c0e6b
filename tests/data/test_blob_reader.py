"""Azure AD access on the stager's GET path: one token for many requests, renewed before it expires."""
import time
from types import SimpleNamespace

from training.blob_reader import STORAGE_SCOPE, _TokenCache


class CountingCredential:
    def __init__(self, lifetime_s):
        self.lifetime_s, self.calls = lifetime_s, []

    def get_token(self, scope):
        self.calls.append(scope)
        return SimpleNamespace(token=f"t{len(self.calls)}", expires_on=int(time.time() + self.lifetime_s))


def test_a_token_is_fetched_once_for_many_requests():
    credential = CountingCredential(3600)
    cache = _TokenCache(credential)
    assert {cache.header() for _ in range(100)} == {"Bearer t1"}
    assert credential.calls == [STORAGE_SCOPE]


def test_a_token_about_to_expire_is_renewed():
    credential = CountingCredential(120)  # inside the five-minute margin
    cache = _TokenCache(credential)
    assert [cache.header(), cache.header()] == ["Bearer t1", "Bearer t2"]
