"""Test support shipped with stead: used by its tests, benchmarks and demos.

``ServerProcess`` runs a real ``stead serve`` (forked by a ``ServeForker`` when
a test starts many); ``FakeModel`` is a scripted upstream model server
(Anthropic Messages and OpenAI chat completions) with injectable faults, so an
agent session can run completely offline.
"""

from stead.testing.client_tls import client_tls
from stead.testing.fake_model import FakeModel
from stead.testing.faults import (
    MAX_FAULT_SECONDS,
    ChunkDelay,
    Delay,
    Disconnect,
    Fault,
    FaultRule,
    HttpError,
    Stall,
    StreamError,
)
from stead.testing.forker import ServeForker
from stead.testing.memory_sandbox import MemoryProvider, MemorySandbox
from stead.testing.origin import serve_origin
from stead.testing.received import ReceivedRequest
from stead.testing.sandbox_host import HostProcess
from stead.testing.scripts import (
    DONE,
    Block,
    Rule,
    Script,
    Text,
    Thinking,
    ToolCall,
    Turn,
    assistant_turns,
    call_every_tool,
    echo,
    when_asked,
)
from stead.testing.server import ServerProcess, free_port

__all__ = [
    "DONE",
    "MAX_FAULT_SECONDS",
    "Block",
    "ChunkDelay",
    "Delay",
    "Disconnect",
    "FakeModel",
    "Fault",
    "FaultRule",
    "HostProcess",
    "HttpError",
    "MemoryProvider",
    "MemorySandbox",
    "ReceivedRequest",
    "Rule",
    "Script",
    "ServeForker",
    "ServerProcess",
    "Stall",
    "StreamError",
    "Text",
    "Thinking",
    "ToolCall",
    "Turn",
    "assistant_turns",
    "call_every_tool",
    "client_tls",
    "echo",
    "free_port",
    "serve_origin",
    "when_asked",
]
