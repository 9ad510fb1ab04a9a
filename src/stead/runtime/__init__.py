"""The runtime room: the agent loop (session actors, turn runner, recovery) and
the delivery of committed events to stream readers."""

from stead.runtime.brainlock import DataDirInUse, brain_lock
from stead.runtime.bus import Bus, LocalBus, Notice, Peers, Preview, Subscription
from stead.runtime.clock import Clock, SystemClock
from stead.runtime.credentials import SessionCredentials
from stead.runtime.deps import LoopDeps, Toolbox, ToolsUnavailable, build_loop
from stead.runtime.embedder import Embedder
from stead.runtime.events import session_deleted
from stead.runtime.feed import FeedItem, SessionFeed
from stead.runtime.files import FileExpired, FileKeeper
from stead.runtime.leases import LeaseSweeper, SweepRound
from stead.runtime.logcache import LogCache
from stead.runtime.mcp import McpGateway
from stead.runtime.mcp_auth import McpEgress, load_mcp, write_back_grant
from stead.runtime.memories import MemoryKeeper, SearchHit
from stead.runtime.models import ModelRouter
from stead.runtime.mounts import SessionMounts
from stead.runtime.refresh_intents import RefreshInDoubt, RefreshMoved, RefreshUnderWay
from stead.runtime.sandboxconfig import sandbox_config
from stead.runtime.served import SandboxView
from stead.runtime.service import Runtime
from stead.runtime.session_leases import keep_renewing
from stead.runtime.sharedbus import SharedBus, open_bus
from stead.runtime.skills import ResolvedSkills, SkillKeeper, check_skill_refs, resolve_skills
from stead.runtime.toolbox import SandboxToolbox
from stead.runtime.webhook_endpoints import WebhookEndpoints
from stead.runtime.webhook_signing import resealed
from stead.runtime.webhook_targets import WebhookEgress
from stead.runtime.webhooks import CourierTerms, WebhookCourier, webhook_parts
from stead.tools import ToolOutcome

__all__ = [
    "Bus",
    "Clock",
    "CourierTerms",
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
    "Preview",
    "RefreshInDoubt",
    "RefreshMoved",
    "RefreshUnderWay",
    "ResolvedSkills",
    "Runtime",
    "SandboxToolbox",
    "SandboxView",
    "SearchHit",
    "SessionCredentials",
    "SessionFeed",
    "SessionMounts",
    "SharedBus",
    "SkillKeeper",
    "Subscription",
    "SweepRound",
    "SystemClock",
    "ToolOutcome",
    "Toolbox",
    "ToolsUnavailable",
    "WebhookCourier",
    "WebhookEgress",
    "WebhookEndpoints",
    "brain_lock",
    "build_loop",
    "check_skill_refs",
    "keep_renewing",
    "load_mcp",
    "open_bus",
    "resealed",
    "resolve_skills",
    "sandbox_config",
    "session_deleted",
    "webhook_parts",
    "write_back_grant",
]
