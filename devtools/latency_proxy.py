"""A TCP proxy on 127.0.0.1 that adds a fixed network delay in front of Azurite, for the staging benchmark.

On loopback a request costs only CPU, and on a 2-core machine the emulator and the client share it, so the
figures measure CPU, not the latency that parallel transfers hide on real Azure (a blob GET from a VM is
milliseconds away). `LatencyProxy(target_port, rtt_ms)` forwards every byte, delayed by rtt/2 in each
direction, pipelined (bytes read while earlier ones wait are not held back further), like a long wire.
"""
from __future__ import annotations

import asyncio
import threading
import time


class LatencyProxy:
    def __init__(self, target_port: int, rtt_ms: float):
        self.target_port, self.one_way = target_port, rtt_ms / 2000
        self.port = 0
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)

    def __enter__(self) -> "LatencyProxy":
        self._thread.start()
        if not self._ready.wait(10):
            raise RuntimeError("latency proxy did not start within 10 s")
        return self

    def __exit__(self, *exc) -> None:
        # Connections still open (a client's idle keep-alive ones) are cancelled and awaited before the loop
        # stops: a loop stopped under them leaves pending tasks that print "Task was destroyed" at exit.
        asyncio.run_coroutine_threadsafe(self._shutdown(), self._loop)
        self._thread.join(10)

    async def _shutdown(self) -> None:
        tasks = [task for task in asyncio.all_tasks() if task is not asyncio.current_task()]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._loop.stop()

    def _serve(self) -> None:
        asyncio.set_event_loop(self._loop)
        server = self._loop.run_until_complete(asyncio.start_server(self._connection, "127.0.0.1", 0))
        self.port = server.sockets[0].getsockname()[1]
        self._ready.set()
        self._loop.run_forever()

    async def _connection(self, client_reader, client_writer) -> None:
        server_reader, server_writer = await asyncio.open_connection("127.0.0.1", self.target_port)
        await asyncio.gather(self._pipe(client_reader, server_writer), self._pipe(server_reader, client_writer),
                             return_exceptions=True)

    async def _pipe(self, reader, writer) -> None:
        queue: asyncio.Queue = asyncio.Queue()

        async def deliver() -> None:
            while (item := await queue.get()) is not None:
                due, data = item
                await asyncio.sleep(max(0.0, due - time.monotonic()))
                writer.write(data)
                await writer.drain()
            writer.close()

        delivery = asyncio.ensure_future(deliver())
        try:
            while data := await reader.read(65536):
                queue.put_nowait((time.monotonic() + self.one_way, data))
        finally:
            queue.put_nowait(None)
            await delivery
