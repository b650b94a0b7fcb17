"""The ``subprocess`` launcher: the worker in a child process of this one, behind walls built here.

`sandbox.SubprocessSandbox` is the sandbox; `isolation` probes and picks the level (`bwrap` builds the
bubblewrap command line, `walls` in `programs/` is what the worker raises itself), `cgroups` makes the
per-sandbox groups, `process` is one worker process's life, `spares` keeps warm workers, `bytecode` starts
the worker from bytecode.
"""

from rlm_adapters.core.sandbox.subprocess.sandbox import SubprocessSandbox

__all__ = ["SubprocessSandbox"]
