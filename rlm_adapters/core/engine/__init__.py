"""The run machinery: one run's tree of levels, the loop, the broker of sub-calls, prompts, parsing, sessions.

Internal to `rlm_adapters.core`: code outside the core reaches what it needs through the core's face
(`rlm_adapters.core`), never these modules.
"""
