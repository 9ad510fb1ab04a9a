"""The runtime room: what moves events between the store and their readers
(and, with the agent loop, the session actors that run turns)."""

from stead.runtime.bus import EventBus, Notice, Subscription
from stead.runtime.feed import FeedItem, SessionFeed

__all__ = ["EventBus", "FeedItem", "Notice", "SessionFeed", "Subscription"]
