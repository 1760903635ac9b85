"""The stdio bridge for MCP clients that only start local servers:

    python3 lb.py mcp-stdio --url http://lessonboard.example:8000/mcp --token lb_…

It speaks MCP on stdin/stdout and relays every message to lessonboard's ``/mcp`` endpoint over
Streamable HTTP with the agent token, and every answer back; both ends are the MCP SDK's own transports.
It needs no database and no Django settings, only the URL and a token (``--token`` or
``LESSONBOARD_TOKEN``). Logs go to stderr: stdout carries the protocol only.
"""

from __future__ import annotations

import argparse
import functools
import os
import sys
from typing import Any

import anyio
import httpx2
from mcp.client.streamable_http import streamable_http_client
from mcp.server.stdio import stdio_server


async def _pump(source: Any, sink: Any) -> None:
    async with sink:
        async for message in source:
            if isinstance(message, Exception):  # a line that is not JSON-RPC: say so, keep going
                print(f"lessonboard mcp-stdio: dropped a malformed message: {message}", file=sys.stderr)
                continue
            await sink.send(message)


async def relay(url: str, token: str, *, timeout: float) -> None:
    headers = {"Authorization": f"Bearer {token}"}
    async with httpx2.AsyncClient(headers=headers, timeout=timeout) as http:
        async with stdio_server() as (local_read, local_write):
            async with streamable_http_client(url, http_client=http) as (remote_read, remote_write, *_):
                async with anyio.create_task_group() as tasks:

                    async def local_to_remote() -> None:
                        await _pump(local_read, remote_write)
                        tasks.cancel_scope.cancel()  # the client closed stdin: we are done

                    tasks.start_soon(local_to_remote)
                    tasks.start_soon(_pump, remote_read, local_write)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="lb.py mcp-stdio", description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", required=True, help="lessonboard's MCP endpoint, e.g. http://127.0.0.1:8000/mcp")
    parser.add_argument("--token", default=os.environ.get("LESSONBOARD_TOKEN", ""), help="an agent token")
    parser.add_argument("--timeout", type=float, default=60.0, help="seconds to wait for one answer (default 60)")
    args = parser.parse_args(argv)
    if not args.url.startswith(("http://", "https://")):
        parser.error("--url must be an http(s) URL of lessonboard's /mcp endpoint")
    if not args.token:
        parser.error("an agent token is needed: --token or LESSONBOARD_TOKEN")
    try:
        anyio.run(functools.partial(relay, args.url, args.token, timeout=args.timeout))
    except KeyboardInterrupt:
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
