"""Persistent sessions (``rlm_query(..., session="name")``): the live REPLs and their records kept for a restart."""
