"""The body: the sandbox host, a process of its own (``stead sandbox-host``).

It runs each sandbox under bubblewrap, cgroups and its own uid (``bwrap.py``,
``cgroups.py``, ``uids.py``), keeps its life (``manager.py``, ``lifecycle.py``:
cold, warming, active, asleep after a snapshot), its terminals and exec
records, installs its packages, and gives it an egress proxy (``egress/``).
It knows nothing of sessions or models. The brain reaches it only through the
typed host protocol in ``stead.sandbox.protocol``; this package may import
``stead.sandbox`` (the shared types and the workspace code in ``local/``) and
``stead.blobs``, and no brain room imports it.
"""

from stead.sandbox_host.config import HostOptions
from stead.sandbox_host.settings import HostSettings

__all__ = ["HostOptions", "HostSettings"]
