"""zeronode for Python: a node of a zeronode mesh (PROTOCOL.md at the repository's root).

A Python node joins Rust (or Python) nodes over ZeroMQ, calls and serves requests, ticks
and streams, by id or by filter, directly or through Rust routers, under CURVE.
"""

from .errors import (
    ConnectFailed,
    HandlerError,
    NodeNotFound,
    NoNodesMatch,
    PeerGone,
    RemoteError,
    StreamViolation,
    Timeout,
    ZeronodeError,
)
from .node import KeyPair, Node, Peer, Request, Response, Route, pack, unpack

__all__ = [
    "ConnectFailed",
    "HandlerError",
    "KeyPair",
    "NoNodesMatch",
    "Node",
    "NodeNotFound",
    "Peer",
    "PeerGone",
    "RemoteError",
    "Request",
    "Response",
    "Route",
    "StreamViolation",
    "Timeout",
    "ZeronodeError",
    "pack",
    "unpack",
]
