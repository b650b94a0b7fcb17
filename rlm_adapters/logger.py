"""The reference RLM's import path for its logger: ``from rlm_adapters.logger import RLMLogger``.

``RLMLogger()`` with no folder keeps each run's trajectory in memory (``result.metadata["trajectory"]``)
and writes no file; ``RLMLogger(log_dir=...)`` writes one JSONL file per run.
"""

from rlm_adapters.core import RLMLogger

__all__ = ["RLMLogger"]
