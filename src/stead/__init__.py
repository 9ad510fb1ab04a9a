"""stead: a self-hosted runtime for long-running AI agents."""
