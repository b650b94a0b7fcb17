"""Setting the server up: its configuration (flags and environment) and its registration in each MCP client."""
