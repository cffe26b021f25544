"""The commands of the ``runledger`` console script, one module per command or group.

Every module exposes ``register(app)``, which adds its commands to the root
Typer app (:mod:`runledger.cli` calls each once). Commands raise; they never
print an error or choose an exit status for one (see :mod:`runledger.errors`).
Option types and configuration they share come from :mod:`runledger.config`;
no module imports another command module.

- ``runs``: ``submit``, ``status``, ``cancel``, ``runs``
- ``preflight``: ``preflight``
- ``pilot``: ``pilot``
- ``logs``: ``logs``
- ``preflight``: ``preflight``; ``drill``: ``drill``
- ``nodes``: ``nodes``, ``node cordon|uncordon|drain``
- ``events``: ``events dump|tail``
- ``dataset``: ``dataset synth|build|show|alias|resolve|list``
- ``checkpoint``: ``checkpoint list|gc``
- ``interval``: ``interval``
- ``project``: ``project``, ``replay``
- ``query``: ``query``
- ``report``: ``report``
- ``agent``: ``agent``
- ``controller``: ``controller``
- ``stack``: ``stack up|down|status|jars``
- ``security``: ``principal add``, ``acl apply``
- ``keys``: ``key create|register|revoke|list``
- ``audit``: ``audit verify|export``
- ``demo``: ``demo``
"""
