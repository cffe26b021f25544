"""The Kafka edge of ``events``: everything that talks to a broker.

The kernel (``events``' own modules) never imports from here; this edge
imports the kernel and ``events.signed``.

- ``broker``: the bootstrap address and whether a broker answers;
  ``connection``: how every client connects (the bootstrap plus the credentials
  file), and the codes that mean an authentication failure.
- ``clients``: the idempotent ``EventProducer``, the quarantine for undecodable
  or refused records, and the one decode-or-quarantine step that makes a
  ``events.record.Record``; ``delivery``: a worker's reports reach the log while
  its heartbeats go on.
- ``transactions``: the controller's ``TransactionalWriter``.
- ``reader``: ``LogReader``, the one group-less reader (assignment from the
  beginning, the end or stored offsets; positions; end of log; quarantine; an
  undecoded mode for whoever judges signatures) and ``Watermarks``;
  ``offsets``: where it starts, and ``LogGap``, the records deleted below a
  stored offset or a lagging position, named, never skipped.
- ``statuslog``: reading ``runledger.status`` back (the newest summary per run).
- ``consume``: ``EventConsumer``, a consumer-group member with explicit commits,
  and ``read_log`` (a dump or a tail of one topic, over ``LogReader``).
- ``keys``: the key ring read live from ``runledger.keys``; ``runkeys``: a run's
  own key, what its workers sign their reports with, vouched for by their node;
  ``reportdoor``: the one door of agents' reports (believed about node N only
  under ``node.N``'s live agent key), which the controller's inputs, its
  follower and ``runledger nodes`` share; ``ahead``: a batch's report signatures
  verified on threads before the door judges it (the projector and ``replay``).
"""
