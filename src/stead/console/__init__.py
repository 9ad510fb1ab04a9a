"""The console: a browser view of a workspace, served by ``api/`` at ``/console``.

Everything here is shipped files: HTML, CSS and JavaScript modules under
``static/`` that talk to the public API only (``/v1/...``), and the browser
packages npm installs from ``package-lock.json`` (``./scripts/setup`` runs
``npm ci`` in this directory). This module only says where those files are;
it imports nothing else of stead.
"""

from __future__ import annotations

from importlib.resources import files
from pathlib import Path

__all__ = ["VENDOR", "assets_dir", "vendor_file"]

VENDOR = {
    "xterm.js": "@xterm/xterm/lib/xterm.js",
    "xterm.css": "@xterm/xterm/css/xterm.css",
    "addon-fit.js": "@xterm/addon-fit/lib/addon-fit.js",
}
"""The files of npm packages the console's pages load, by the name they load them as."""


def _root() -> Path:
    return Path(str(files(__name__)))


def assets_dir() -> Path:
    """The console's own pages, styles and scripts."""
    return _root() / "static"


def vendor_file(name: str) -> Path | None:
    """A browser package's file by its name in ``VENDOR``; None for any other
    name, or when ``npm ci`` has not installed it."""
    relative = VENDOR.get(name)
    if relative is None:
        return None
    path = _root() / "node_modules" / relative
    return path if path.is_file() else None
