"""The GCS emulator the filesystem tests run (`gcp-storage-emulator`), with the JSON API's `objects.move`.

gcsfs (2025.x and later) renames an object with `POST .../o/{src}/moveTo/o/{dst}` and falls back to copy and
delete only after that call fails. The emulator has no such route and answers 501, which gcsfs counts as
retryable: six tries with backoff, about 50 s for every rename, before the fallback. A token store written
to the emulator renames a few dozen objects, so three store tests took 104-207 s each (415 s of a 21-minute
suite). Real GCS implements the call; this adds it to the emulator (a copy, then the source deleted, the
destination's resource returned, as the API documents) rather than changing what the code under test calls.
Run as `python tests/engine/gcs_emulator.py start --host ... --port ...` (the emulator's own arguments).
"""

from __future__ import annotations

import sys
from http import HTTPStatus

from gcp_storage_emulator import server
from gcp_storage_emulator.__main__ import main
from gcp_storage_emulator.exceptions import Conflict, NotFound
from gcp_storage_emulator.handlers import objects
from gcp_storage_emulator.settings import API_ENDPOINT


def move(request, response, storage, *args, **kwargs) -> None:
    """objects.move: the object under its new name in the same bucket, the old name gone."""
    bucket = request.params["bucket_name"]
    try:
        moved = objects._copy(
            request.base_url,
            storage,
            bucket,
            request.params["object_id"],
            bucket,
            request.params["dest_object_id"],
        )
        storage.delete_file(bucket, request.params["object_id"])
    except NotFound:
        response.status = HTTPStatus.NOT_FOUND
        return
    except Conflict:
        response.status = HTTPStatus.CONFLICT
        return
    response.json(moved)


def _move_route(prefix: str) -> tuple[str, dict]:
    return (
        rf"^{prefix}/b/(?P<bucket_name>[-.\w]+)/o/(?P<object_id>.*[^/]+)/moveTo/o/(?P<dest_object_id>.*[^/]+)$",
        {server.POST: move},
    )


# Before the generic object routes, which would take `a/moveTo/o/b` for an object name.
server.HANDLERS = (_move_route(API_ENDPOINT), _move_route(""), *server.HANDLERS)

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
