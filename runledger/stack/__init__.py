"""A local Apache Kafka (KRaft) cluster for development and tests.

- ``cluster``: :class:`Stack` (start, stop, inspect the cluster of one data
  directory) and :func:`cluster_up` / :func:`cluster_status` for an existing
  cluster (``RUNLEDGER_BOOTSTRAP``);
- ``jars``: the broker's jars, fetched once by Maven into a cache;
- ``layout``: ports, ``stack.json`` and each node's ``server.properties``;
- ``proc``: starting, finding and stopping the broker JVMs;
- ``private``: the data directory owner-only (0700 directories, 0600 files, the
  broker's umask 077);
- ``admin``: admin calls against any running cluster (readiness, topics).

Every error it reports is a :class:`~runledger.errors.StackError`.
"""

from runledger.stack.cluster import (
    BrokerInfo,
    Stack,
    StackError,
    StackInfo,
    StackStatus,
    TopicInfo,
    cluster_status,
    cluster_up,
)

__all__ = [
    "BrokerInfo",
    "Stack",
    "StackError",
    "StackInfo",
    "StackStatus",
    "TopicInfo",
    "cluster_status",
    "cluster_up",
]
