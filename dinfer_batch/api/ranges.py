"""Downloads that resume: one answer for GET and HEAD of a file with a known size and
ETag, honouring `Range: bytes=` (RFC 9110) without reading the bytes before the range.

A single range gets 206 with Content-Range; a range that starts past the end gets 416
with `Content-Range: bytes */SIZE`; a header that is not one valid `bytes=` range
(several ranges, another unit, a malformed one) is ignored and the whole file is sent with
200, which RFC 9110 allows (multipart/byteranges is not built). `If-Range` with another
ETag (the file changed since the client's first part) also gets the whole file. Every
answer carries Content-Length, ETag and `Accept-Ranges: bytes`: a body cut short (the
connection dropped, or the job's results deleted while they were sent) is one the client
can tell from a complete one. `If-None-Match` naming the current ETag (or `*`) gets 304
with no body: a client that has the file reads nothing again. A Range header's numbers
are at most 18 digits: a longer one is not a valid range (ignored, as above)."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator

from fastapi import Request
from fastapi.responses import Response, StreamingResponse

from dinfer_batch.api.errors import error_response, server_dirs

# at most 18 digits a side: every offset a file can have, and nothing int() is slow on
_RANGE = re.compile(r"bytes=(\d{0,18})-(\d{0,18})", re.ASCII)

Reader = Callable[[int, int], Iterator[bytes]]  # bytes [start, stop) of the file


class Unsatisfiable(Exception):
    pass


def byte_range(header: str | None, size: int) -> tuple[int, int] | None:
    """[start, stop) that a Range header asks for, None for the whole file; raises
    Unsatisfiable for a valid range that starts at or past the end."""
    match = _RANGE.fullmatch(header.strip()) if header else None
    if match is None or match.group(1) == match.group(2) == "":
        return None
    first, last = match.group(1), match.group(2)
    if first != "" and last != "" and int(last) < int(first):
        return None  # invalid: ignored
    if size == 0:
        raise Unsatisfiable
    if first == "":  # the last N bytes
        if int(last) == 0:
            raise Unsatisfiable
        return max(0, size - int(last)), size
    start = int(first)
    if start >= size:
        raise Unsatisfiable
    return start, size if last == "" else min(size, int(last) + 1)


def ranged(request: Request, size: int, etag: str, read: Reader, media_type: str,
           headers: dict[str, str] | None = None) -> Response:
    """The answer to GET or HEAD `request` of a file of `size` bytes read by `read`."""
    common = {"Accept-Ranges": "bytes", "ETag": f'"{etag}"'} | (headers or {})
    if _matches(request.headers.get("if-none-match"), etag):
        return Response(status_code=304, headers=common)
    wanted = request.headers.get("range")
    if_range = request.headers.get("if-range")
    if if_range is not None and if_range.strip() != f'"{etag}"':
        wanted = None  # the client's earlier part is of other content: send it all
    try:
        span = byte_range(wanted, size)
    except Unsatisfiable:
        return error_response(416, f"range {wanted} is outside the file of {size} bytes",
                              "Range", "range_not_satisfiable", dirs=server_dirs(request.app),
                              headers=common | {"Content-Range": f"bytes */{size}"})
    start, stop = span or (0, size)
    common["Content-Length"] = str(stop - start)
    status = 200
    if span is not None:
        status = 206
        common["Content-Range"] = f"bytes {start}-{stop - 1}/{size}"
    if request.method == "HEAD":
        return Response(status_code=status, headers=common, media_type=media_type)
    return StreamingResponse(read(start, stop), status_code=status, headers=common,
                             media_type=media_type)


def _matches(if_none_match: str | None, etag: str) -> bool:
    """Whether an If-None-Match header names `etag` (or is `*`): the client has these
    bytes already. Weak comparison (RFC 9110 13.1.2): a `W/` prefix does not matter."""
    if if_none_match is None:
        return False
    tags = [tag.strip().removeprefix("W/") for tag in if_none_match.split(",")]
    return "*" in tags or f'"{etag}"' in tags


def file_reader(path: str, chunk: int = 1 << 20) -> Reader:
    """`read` for a file on disk."""

    def read(start: int, stop: int) -> Iterator[bytes]:
        with open(path, "rb") as handle:
            handle.seek(start)
            left = stop - start
            while left > 0 and (data := handle.read(min(chunk, left))):
                left -= len(data)
                yield data

    return read


RANGE_RESPONSES: dict[int | str, dict] = {
    200: {"content": {"application/octet-stream": {}},
          "description": "The whole file (also for a Range header that is ignored)"},
    206: {"content": {"application/octet-stream": {}},
          "description": "The single byte range asked for, with Content-Range"},
    304: {"description": "Not modified: If-None-Match names the file's current ETag"},
}
