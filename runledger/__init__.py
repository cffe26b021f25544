"""runledger: the command line and the local Kafka stack.

- ``cli``: the ``runledger`` console script (typer), thin wiring only.
- ``stack``: starting, stopping and inspecting a local Apache Kafka (KRaft)
  cluster built from the Maven Central jars.
- ``eventscli``: ``runledger events tail|dump``.
"""
