"""One ``rlm_query`` call and the runs it starts: its arguments and inputs, the run with its progress and budget
questions, the MCP client's model as a backend, what it hands back, and background runs and MCP tasks."""
