"""What the MCP server may read: the roots the client names files under, and the stable ids of inputs."""

from __future__ import annotations

import hashlib
from pathlib import Path

from mcp.server.mcpserver.exceptions import ToolError

from .. import __version__


class Refused(ToolError):
    """A request the server turns down: one line, sent to the client as the tool's error."""


class Roots:
    """The folders the client may name files in (`--root`, default the current directory)."""

    def __init__(self, roots: list[str | Path]):
        self.roots = [Path(r).resolve(strict=True) for r in roots]

    def resolve(self, path: str) -> Path:
        """`path` (relative: to the first root) resolved through symlinks, or Refused outside every root."""
        if not isinstance(path, str) or not path.strip() or "\x00" in path:
            raise Refused("a path is required")
        p = Path(path).expanduser()
        p = (p if p.is_absolute() else self.roots[0] / p).resolve()
        if not any(p == r or p.is_relative_to(r) for r in self.roots):
            raise Refused(
                f"{path}: outside the allowed roots ({', '.join(map(str, self.roots))}); "
                "start the server with --root to allow it"
            )
        if not p.exists():
            raise Refused(f"{path}: no such file or directory")
        return p

    def check_files(self, p: Path) -> None:
        """A directory's trace files must resolve under a root too (a symlink inside may point out)."""
        from ..ingest.loader import input_files

        for f in input_files(p):
            r = f.resolve()
            if not any(r == root or r.is_relative_to(root) for root in self.roots):
                raise Refused(f"{f}: links outside the allowed roots")


def input_id(kind: str, paths: list[Path], extra: str) -> str:
    """A deterministic id: the kind, `extra` and each input file's path, size and modification time (the same
    unchanged input gives the same id; nothing is read, so a FIFO or a huge file costs nothing here)."""
    from ..ingest.loader import input_files

    h = hashlib.sha256(f"{kind}\0{extra}\0{__version__}".encode())
    for p in paths:
        for f in input_files(p):
            st = f.stat()
            h.update(f"{f}\0{st.st_size}\0{st.st_mtime_ns}\0".encode())
    return f"{kind}-{h.hexdigest()[:12]}"
