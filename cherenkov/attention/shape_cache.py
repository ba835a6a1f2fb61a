"""A bounded per-shape cache whose entries a CUDA graph may hold.

Block masks and plans are kept per shape so that a call does not rebuild them; past `limit`
entries the cache drops what it holds, so that dynamic shapes do not grow it without end.
An entry handed out while a CUDA graph is being captured is pinned: the graph's replays read
its tensors (block lists) by address, so dropping it would let them read freed memory.
"""
from __future__ import annotations

import threading

import torch


def capturing() -> bool:
    """Whether this thread's current CUDA stream is capturing a graph."""
    return torch.cuda.is_available() and torch.cuda.is_current_stream_capturing()


class ShapeCache:
    def __init__(self, limit: int):
        self.limit = limit
        self.items: dict = {}
        self.pinned: set = set()
        self._lock = threading.Lock()

    def get(self, key):
        value = self.items.get(key)
        if value is not None and capturing():
            with self._lock:
                self.pinned.add(key)
        return value

    def put(self, key, value):
        with self._lock:
            if len(self.items) >= self.limit:
                for k in [k for k in self.items if k not in self.pinned]:
                    del self.items[k]
            self.items[key] = value
            if capturing():
                self.pinned.add(key)
        return value

    def __len__(self) -> int:
        return len(self.items)

    def clear(self) -> None:
        """Drop every unpinned entry."""
        with self._lock:
            for k in [k for k in self.items if k not in self.pinned]:
                del self.items[k]
