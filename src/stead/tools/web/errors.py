"""Web tool errors. Every one is the model's to read: ``str(error)`` says what
went wrong (a refused host, a failed connection, a timeout, an HTTP error, a
body web_fetch cannot read), and the tool answers it as an ``is_error`` result,
never as a failed turn.

WebError        any failure of one web_fetch or web_search call
"""

from __future__ import annotations


class WebError(Exception):
    """One web tool call failed; ``str()`` is the message for the model."""
