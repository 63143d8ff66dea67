"""Write the transcript of a real `traceview mcp` session into docs/agents.md: the MCP SDK's client starts the
server over stdio on the bundled traces and calls the tools an assistant would, in order.

    python tools/mcp_transcript.py            # print the transcript (Markdown)
    python tools/mcp_transcript.py --write    # replace the block between the markers in docs/agents.md

Answers are shown pretty-printed (the server sends compact JSON); the repository's absolute path is shown as `.`.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

import anyio
from mcp import Client, StdioServerParameters

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "agents.md"
BEGIN, END = "<!-- transcript: tools/mcp_transcript.py -->", "<!-- /transcript -->"
TRACE = "gpu_h200/sync_item_nonzero_cpu.json.gz"


async def session() -> list[tuple[str, dict, bool, str]]:
    params = StdioServerParameters(
        command=sys.executable,
        cwd=str(ROOT),
        args=["-m", "traceview", "mcp", "--root", str(ROOT / "sample_traces")],
    )
    out = []
    async with Client(params) as c:

        async def call(name: str, args: dict, show: bool = True) -> dict:
            r = await c.call_tool(name, args)
            if show:
                out.append((name, args, r.is_error, r.content[0].text))
            return r.structured_content or {}

        a = await call("analyze", {"path": TRACE})
        aid = a["analysis"]
        await call("findings", {"analysis": aid, "severity": "error", "limit": 3})
        await call("explain", {"finding": "t0.f1", "analysis": aid})
        tl = await call(
            "timeline", {"analysis": aid, "step": 2, "limit": 1}, show=False
        )  # where the syncs are
        sync = next(iter(tl.get("syncs") or []), None)
        t0 = sync["ts_us"] if sync else 0.0
        await call("timeline", {"analysis": aid, "step": 2, "t0_us": t0, "t1_us": t0 + 40, "limit": 6})
        await call("document", {"analysis": aid, "pointer": "/traces/0/projection"})
        await call("analyze", {"path": "/etc/passwd"})
    return out


def _pretty(answer: dict) -> str:
    """Indented JSON with lists of numbers and short strings on one line."""
    text = json.dumps(answer, indent=1, ensure_ascii=False)
    return re.sub(
        r"\[\n\s+([^\[\]{}]*?)\n\s*\]", lambda m: "[" + re.sub(r",\n\s*", ", ", m.group(1)) + "]", text
    )


def markdown(calls: list[tuple[str, dict, bool, str]]) -> str:
    lines = []
    for name, args, err, text in calls:
        args = {k: v for k, v in args.items() if v is not None}
        lines.append(f"**→ `{name}`** `{json.dumps(args, ensure_ascii=False)}`\n")
        body = text if err else _pretty(json.loads(text))
        body = body.replace(str(ROOT), ".")
        lines.append(f"```{'text' if err else 'json'}\n{body}\n```\n")
    return "\n".join(lines)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument(
        "--write", action="store_true", help=f"replace the transcript block of {DOC.relative_to(ROOT)}"
    )
    args = p.parse_args()
    md = markdown(anyio.run(session))
    if not args.write:
        sys.stdout.write(md)
        return 0
    doc = DOC.read_text(encoding="utf-8")
    head, _, rest = doc.partition(BEGIN)
    _, _, tail = rest.partition(END)
    DOC.write_text(f"{head}{BEGIN}\n{md}{END}{tail}", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
