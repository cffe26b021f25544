"""The signing side of ``events``: keys, signatures and the audit of the signed log.

Pure but for the cryptography libraries; it imports the kernel and never the
Kafka edge (``events.kafka``), so an auditor verifies a copy of the log in
files with no broker and no Kafka client.

- ``signing``: Ed25519 keys, the domain-separated message each use signs, fact
  and key-record digests (each run's hash chain, and the keys log's) and the
  signature headers; ``seen``: the memo of signatures this process verified;
  ``bulk``: a batch of signatures verified in one compiled call without the GIL
  (``runledger_native``), with the libsodium function PyNaCl verifies with;
- ``keyring``: the pure fold of key records into who holds which key, and the
  one signature judge (``check``);
- ``audit``: offline verification of the keys log and every run's signed chain;
- ``loghead``: the signed heads an exported copy carries, judged against the copy.
"""
