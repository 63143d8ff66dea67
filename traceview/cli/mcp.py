"""CLI of `traceview mcp`: its flags, and serving the MCP server over stdio or streamable HTTP."""

from __future__ import annotations

import argparse
import hmac
import ipaddress
import os
import sys
from typing import Any

from ..errors import TraceError
from ..ingest.inputs import DEFAULT_MAX_BYTES

TOKEN_ENV = "TRACEVIEW_MCP_TOKEN"  # the bearer token HTTP clients must send (required off localhost)
DEFAULT_PORT = 8765


def add_parser(sub: argparse._SubParsersAction, size: Any) -> None:
    from ..agent.bounds import DEFAULT_BUDGET_TOKENS, MAX_BUDGET_TOKENS, MIN_BUDGET_TOKENS

    m = sub.add_parser(
        "mcp",
        help="serve the analyses to coding assistants (Model Context Protocol; docs/agents.md)",
        description="A Model Context Protocol server: analyze, findings, explain, layers, kernels, "
        "ops, timeline, diff, job, document. stdio by default (the client starts it); "
        "--http serves streamable HTTP. Needs the `mcp` extra.",
    )
    m.add_argument(
        "--root",
        action="append",
        metavar="DIR",
        help="folder whose traces the client may read (repeatable; default: the current directory)",
    )
    m.add_argument(
        "--http",
        metavar="HOST:PORT",
        default=None,
        help=f"serve streamable HTTP at http://HOST:PORT/mcp instead of stdio (HOST default 127.0.0.1, "
        f"PORT default {DEFAULT_PORT}); a HOST other than localhost requires ${TOKEN_ENV}",
    )
    m.add_argument(
        "--budget",
        type=int,
        default=DEFAULT_BUDGET_TOKENS,
        metavar="TOKENS",
        help=f"largest answer in tokens at 4 bytes of JSON a token ({MIN_BUDGET_TOKENS}-{MAX_BUDGET_TOKENS}, "
        f"default {DEFAULT_BUDGET_TOKENS}); the rest is paged",
    )
    m.add_argument(
        "--max-bytes",
        type=size,
        default=DEFAULT_MAX_BYTES,
        metavar="SIZE",
        help="largest input held in memory, after decompression (default 8G)",
    )
    m.set_defaults(func=cmd_mcp)


def parse_http(value: str) -> tuple[str, int]:
    """HOST:PORT, :PORT, HOST or [v6]:PORT -> (host, port)."""
    if value.startswith("["):
        host, _, rest = value[1:].partition("]")
        port = rest.removeprefix(":")
    elif value.count(":") == 1:
        host, port = value.split(":")
    else:  # a bare host (or IPv6 address)
        host, port = value, ""
    host = host or "127.0.0.1"
    try:
        p = int(port) if port else DEFAULT_PORT
    except ValueError:
        raise TraceError(f"--http {value!r}: the port must be a number (HOST:PORT)") from None
    if not 0 < p < 65536:
        raise TraceError(f"--http {value!r}: port out of range")
    return host, p


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def bearer(app: Any, token: str) -> Any:
    """ASGI wrapper: HTTP requests without `Authorization: Bearer <token>` get 401."""

    async def wrapped(scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            got = dict(scope.get("headers") or []).get(b"authorization", b"").decode("latin-1")
            if not hmac.compare_digest(got.encode(), f"Bearer {token}".encode()):
                await send(
                    {
                        "type": "http.response.start",
                        "status": 401,
                        "headers": [(b"content-type", b"text/plain"), (b"www-authenticate", b"Bearer")],
                    }
                )
                await send(
                    {"type": "http.response.body", "body": b"traceview mcp: missing or wrong bearer token\n"}
                )
                return
        await app(scope, receive, send)

    return wrapped


def http_app(app: Any, host: str, token: str | None) -> Any:
    """The streamable-HTTP ASGI app at /mcp (DNS-rebinding protection on localhost, the SDK's default), behind
    the bearer token when there is one."""
    asgi = app.streamable_http_app(host=host)
    return bearer(asgi, token) if token else asgi


def cmd_mcp(args: argparse.Namespace) -> int:
    from ..agent.bounds import MAX_BUDGET_TOKENS, MIN_BUDGET_TOKENS

    if not MIN_BUDGET_TOKENS <= args.budget <= MAX_BUDGET_TOKENS:
        raise TraceError(
            f"--budget {args.budget}: between {MIN_BUDGET_TOKENS} and {MAX_BUDGET_TOKENS} tokens"
        )
    try:
        from ..agent.server import build
    except ImportError as e:
        raise TraceError(f"traceview mcp needs the MCP SDK: pip install 'traceview[mcp]' ({e})") from None
    roots = args.root or [os.getcwd()]
    for r in roots:
        if not os.path.isdir(r):
            raise TraceError(f"--root {r}: not a directory")
    app, _ = build(roots, args.budget, args.max_bytes)
    if args.http is None:
        try:
            app.run("stdio")
        except KeyboardInterrupt:  # the usual way to stop a server by hand
            pass
        return 0
    host, port = parse_http(args.http)
    token = os.environ.get(TOKEN_ENV) or None
    if not is_loopback(host) and not token:
        raise TraceError(
            f"--http {args.http}: serving beyond localhost requires a token in ${TOKEN_ENV} "
            "(clients send it as 'Authorization: Bearer TOKEN')"
        )
    import uvicorn

    print(
        f"traceview mcp: http://{host}:{port}/mcp (roots: {', '.join(roots)})"
        + (" (bearer token required)" if token else ""),
        file=sys.stderr,
    )
    uvicorn.run(http_app(app, host, token), host=host, port=port, log_level="warning")
    return 0
