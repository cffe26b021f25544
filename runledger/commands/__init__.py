"""The commands of the ``runledger`` console script, one module per command or group."""
