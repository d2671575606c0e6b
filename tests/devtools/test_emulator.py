"""Azurite as devtools/emulator.py runs it for the demo, the data-path tests and the rehearsal."""
import http.client
import time
from urllib.request import urlopen

from devtools.emulator import ACCOUNT, Azurite


def test_a_stop_with_a_clients_connection_open_is_prompt_and_keeps_the_data(tmp_path):
    # Azurite, once closed, waits for its clients' keep-alive sockets, which an SDK client left open never
    # closes: the stop ended in a 10 s wait and a kill, in every test and rehearsal that stops one.
    with Azurite(location=tmp_path) as azurite:
        azurite.create_container("kept")
        client = http.client.HTTPConnection("127.0.0.1", azurite.port, timeout=10)
        client.request("GET", f"/{ACCOUNT}?comp=list")
        client.getresponse().read()
        asked = time.monotonic()
    stopped_in = time.monotonic() - asked
    client.close()
    assert stopped_in < 5, stopped_in
    with Azurite(location=tmp_path) as again:  # what it saved before it said so is there for the next start
        listing = urlopen(again.container_url("kept", "rl") + "&restype=container&comp=list", timeout=10)
        assert listing.status == 200
