"""Write as releases before issue 34 did: pydantic's default encoding wrote NaN and
±Infinity as `null` in the log while the live projection got the number itself."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import pydantic_core

from core.events import Payload


def old_encode(payload: Payload) -> str:
    """The payload's text as the old writer logged it (`model_dump_json` without the
    constants setting: the same bytes, non-finite floats as `null`)."""
    return pydantic_core.to_json(payload.model_dump(), inf_nan_mode="null").decode()


@contextlib.contextmanager
def old_release() -> Iterator[None]:
    """This process's writer encodes as the old release did (no refusal) meanwhile."""
    from core.store import writer

    m = writer._models()
    saved = m.encode
    m.encode = old_encode
    try:
        yield
    finally:
        m.encode = saved
