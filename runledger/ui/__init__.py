"""``runledger ui``: a live, read-only web view of the runs, the nodes and the workers' output.

- ``feeds``: the readers, each in its own thread: the compacted
  ``runledger.status`` (run summaries), the nodes (``runledger nodes``' rows)
  and the projector's snapshot;
- ``views``: each page's JSON document, pure;
- ``api``: :class:`~runledger.ui.api.LiveView`, the answers, put together
  from the feeds and the projection;
- ``auth``: who may look (loopback, or an operator's Kafka credentials over TLS);
- ``server``: the HTTP routes (read-only, standard library);
- ``serve``: starting and stopping it all (``runledger ui``);
- ``static/``: the page shell, its script and its styles, shipped in the
  package (nothing is fetched from the internet).
"""
