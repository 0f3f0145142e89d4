"""A Redis that goes wrong in the ways a dead or overloaded one does, on demand.

``silent``: accepts connections and reads commands, never answers (a
black-holed server, a full accept queue behind a proxy). ``half``: answers
every command with half a reply and stops there. ``close``: half a reply, then
closes the connection. Each leaves the client waiting on a socket read that
only its own timeouts can end.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Literal

Behaviour = Literal["silent", "half", "close"]


class BadRedis:
    def __init__(self, behaviour: Behaviour) -> None:
        self.behaviour = behaviour
        self.connections = 0
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()

    @property
    def url(self) -> str:
        assert self._server is not None
        port = self._server.sockets[0].getsockname()[1]
        return f"redis://127.0.0.1:{port}/0"

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        self._writers.add(writer)
        try:
            while await reader.read(65536):
                if self.behaviour == "silent":
                    continue
                writer.write(b"$10\r\nhal")          # a bulk string cut short
                await writer.drain()
                if self.behaviour == "close":
                    break
        except ConnectionError:
            pass
        finally:
            self._writers.discard(writer)
            writer.close()
            with contextlib.suppress(ConnectionError):
                await writer.wait_closed()

    async def close(self) -> None:
        if self._server is None:
            return
        self._server.close()
        for writer in list(self._writers):
            writer.close()
        await self._server.wait_closed()
