"""Python client of graphbandit, the online recommendation service.

    from graphbandit import Client

    with Client("127.0.0.1:50051") as client:
        decision = client.select("alice", {"a": [1, 0], "b": [0, 1]})
        client.reward(decision.event_id, 1.0)

The message classes are in ``graphbandit.v1.bandit_pb2`` (generated at build time from
proto/graphbandit/v1/bandit.proto). See client/python/README.md.
"""

from graphbandit.client import Client, GraphbanditError, named_features
from graphbandit.v1 import bandit_pb2

__all__ = ["Client", "GraphbanditError", "bandit_pb2", "named_features"]
