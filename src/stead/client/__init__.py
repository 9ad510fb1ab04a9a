"""Clients of a stead server beyond the anthropic SDK: terminals into a
session's sandbox (``Terminal``), used by ``stead shell`` and ``stead exec``."""

from stead.client.terminal import Output, Terminal, TerminalError

__all__ = ["Output", "Terminal", "TerminalError"]
