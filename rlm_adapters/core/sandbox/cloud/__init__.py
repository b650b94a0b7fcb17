"""The cloud sandboxes: the worker on a provider's machine, one per run.

`remote.RemoteSandbox` is what they share (the bootstrap shipped in, the channel, restarts, teardown);
`transport` carries bytes through a provider's process API. One module per provider (``e2b``, ``modal``,
``prime``, ``daytona``), each imported only when its kind is asked for, with its SDK as an optional extra.
"""
