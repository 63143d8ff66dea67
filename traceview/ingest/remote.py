"""Inputs in object storage: `s3://…`, `gs://…` and other fsspec URLs (`pip install traceview[remote]`, plus the
store's own fsspec package: s3fs, gcsfs, adlfs…) are read into a private temporary folder with the byte cap of
local inputs, keeping a folder's layout (a job folder of ranks stays one job), and the local paths replace them.
A missing or denied object is one error line naming the URL."""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import TraceError
from .inputs import DEFAULT_MAX_BYTES, human

if TYPE_CHECKING:
    import tempfile

URL = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")
#: files of a folder worth reading: traces and the collector's manifests
WANTED = (".json", ".json.gz", ".gz")
CHUNK = 1 << 20


def is_url(text: str | Path) -> bool:
    return bool(URL.match(str(text)))


def _fs(url: str) -> tuple[Any, str]:
    try:
        import fsspec
    except ImportError:
        raise TraceError(
            f"{url}: reading URLs needs the optional extra: pip install 'traceview[remote]' "
            "(fsspec; and s3fs for s3://, gcsfs for gs://)"
        ) from None
    try:
        return fsspec.core.url_to_fs(url)
    except (ImportError, ValueError) as e:  # an unknown protocol or its package missing
        raise TraceError(f"{url}: {e}") from None


def _error(url: str, e: BaseException) -> TraceError:
    if isinstance(e, FileNotFoundError):
        return TraceError(f"{url}: no such object")
    if isinstance(e, PermissionError):
        return TraceError(f"{url}: access denied")
    return TraceError(f"{url}: cannot read ({type(e).__name__}: {e})")


def _copy(fs: Any, src: str, dst: Path, url: str, cap: int) -> None:
    """Stream one object to `dst`, at most `cap` bytes (as stored: a .gz is capped again when decompressed)."""
    dst.parent.mkdir(parents=True, exist_ok=True)
    got = 0
    with fs.open(src, "rb") as fin, open(dst, "wb") as fout:
        while chunk := fin.read(CHUNK):
            got += len(chunk)
            if got > cap:
                raise TraceError(f"{url}: larger than the {human(cap)} limit (--max-bytes)")
            fout.write(chunk)


def fetch(url: str, into: Path, cap: int = DEFAULT_MAX_BYTES) -> Path:
    """The local copy of `url` under `into`: a file, or a folder with the wanted files of the prefix below it."""
    fs, root = _fs(url)
    root = root.rstrip("/")
    name = Path(root).name or "bucket"
    try:
        if fs.isdir(root):
            files = [f for f in sorted(fs.find(root)) if f.endswith(WANTED)]
            if not files:
                raise TraceError(f"{url}: holds no trace files (*.json, *.json.gz)")
            base = into / name
            for f in files:
                rel = f[len(root) :].lstrip("/")
                _copy(fs, f, base / rel, url.rstrip("/") + "/" + rel, cap)
            return base
        if not fs.exists(root):
            raise FileNotFoundError(root)
        dst = into / name
        _copy(fs, root, dst, url, cap)
        return dst
    except TraceError:
        raise
    except Exception as e:  # noqa: BLE001 - a store's own errors (botocore, gcsfs): one line
        raise _error(url, e) from None


_TEMP: list[tempfile.TemporaryDirectory] = []  # removed when the process exits (weakref finalizers)


def stage(
    paths: list[str], cap: int | None = None, errors: list[dict] | None = None
) -> tuple[list[str], dict[str, str]]:
    """(the paths with every URL replaced by its local copy, {local copy: URL}); the copies live in a private
    temporary folder removed at exit. A URL that cannot be read raises its TraceError, or, with `errors`
    given (batch: one bad input never aborts the others), is left out and added there as {path, error}."""
    if not any(is_url(p) for p in paths):
        return list(paths), {}
    import tempfile  # (here: tempfile imports random and hashlib, ~2 ms of a run of local files; issue 32)

    tmp = tempfile.TemporaryDirectory(prefix="traceview-remote-")
    _TEMP.append(tmp)
    out: list[str] = []
    back: dict[str, str] = {}
    for k, p in enumerate(paths):
        if not is_url(p):
            out.append(p)
            continue
        try:
            local = fetch(p, Path(tmp.name) / str(k), cap or DEFAULT_MAX_BYTES)
        except TraceError as e:
            if errors is None:
                raise
            errors.append({"path": p, "error": str(e)})
            continue
        out.append(str(local))
        back[str(local)] = p.rstrip("/")
    return out, back


def restore(obj: Any, back: dict[str, str]) -> Any:
    """`obj` (a report document) with the local copies' paths written as their URLs again."""
    if not back:
        return obj
    if isinstance(obj, str):
        for local, url in back.items():
            if obj.startswith(local):
                return url + obj[len(local) :]
        return obj
    if isinstance(obj, list):
        return [restore(v, back) for v in obj]
    if isinstance(obj, dict):
        return {k: restore(v, back) for k, v in obj.items()}
    return obj
