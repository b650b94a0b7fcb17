"""The ``rlm_recall`` tool: Claude Code's own session transcripts as documents, and which session is current."""
