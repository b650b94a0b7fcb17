"""REPL sandboxes behind one protocol, and the one worker program they all run."""

from rlm_adapters.core.sandbox.base import BudgetSpent, CallError, CellResult, FinalAnswer, Sandbox, SandboxSetup
from rlm_adapters.core.sandbox.factory import make_sandbox, sandbox_kinds

__all__ = [
    "BudgetSpent",
    "CallError",
    "CellResult",
    "FinalAnswer",
    "Sandbox",
    "SandboxSetup",
    "make_sandbox",
    "sandbox_kinds",
]
