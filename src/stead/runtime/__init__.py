"""The runtime room: the agent loop (session actors, turn runner, recovery) and
the delivery of committed events to stream readers."""

from stead.runtime.brainlock import DataDirInUse, brain_lock
from stead.runtime.bus import Bus, LocalBus, Notice, Peers, Subscription
from stead.runtime.clock import Clock, SystemClock
from stead.runtime.credentials import SessionCredentials
from stead.runtime.deps import LoopDeps, Toolbox, ToolsUnavailable, build_loop
from stead.runtime.embedder import Embedder
from stead.runtime.feed import FeedItem, SessionFeed
from stead.runtime.files import FileExpired, FileKeeper
from stead.runtime.leases import LeaseSweeper, SweepRound
from stead.runtime.logcache import LogCache
from stead.runtime.mcp import McpGateway
from stead.runtime.mcp_auth import McpEgress, load_mcp, refresh_grant, write_back_grant
from stead.runtime.memories import MemoryKeeper, SearchHit
from stead.runtime.models import ModelRouter
from stead.runtime.sandboxconfig import sandbox_config
from stead.runtime.service import Runtime
from stead.runtime.sharedbus import SharedBus, open_bus
from stead.runtime.toolbox import SandboxToolbox, SandboxView
from stead.tools import ToolOutcome

__all__ = [
    "Bus",
    "Clock",
    "DataDirInUse",
    "Embedder",
    "FeedItem",
    "FileExpired",
    "FileKeeper",
    "LeaseSweeper",
    "LocalBus",
    "LogCache",
    "LoopDeps",
    "McpEgress",
    "McpGateway",
    "MemoryKeeper",
    "ModelRouter",
    "Notice",
    "Peers",
    "Runtime",
    "SandboxToolbox",
    "SandboxView",
    "SearchHit",
    "SessionCredentials",
    "SessionFeed",
    "SharedBus",
    "Subscription",
    "SweepRound",
    "SystemClock",
    "ToolOutcome",
    "Toolbox",
    "ToolsUnavailable",
    "brain_lock",
    "build_loop",
    "load_mcp",
    "open_bus",
    "refresh_grant",
    "sandbox_config",
    "write_back_grant",
]
