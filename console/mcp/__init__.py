"""lessonboard as an MCP server: its tools (``tools``), the ``/mcp`` endpoint (``views``) and the stdio
bridge for local-only clients (``stdio``)."""
