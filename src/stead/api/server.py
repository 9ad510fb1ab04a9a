"""uvicorn's server, which tells the app it is stopping before it waits for
the app's open responses to end (``stop_streams``)."""

from __future__ import annotations

import socket

import uvicorn
from fastapi import FastAPI

from stead.api.app import stop_streams


class Server(uvicorn.Server):
    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        if isinstance(self.config.app, FastAPI):
            stop_streams(self.config.app)
        await super().shutdown(sockets=sockets)
