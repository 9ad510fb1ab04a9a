"""The API room: HTTP routes, auth, errors, pagination and SSE. Never touches SQL."""

from stead.api.app import create_app

__all__ = ["create_app"]
