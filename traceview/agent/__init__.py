"""The agent interface: a Model Context Protocol server over the report document (traceview mcp)."""
