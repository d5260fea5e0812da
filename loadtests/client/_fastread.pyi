"""Types of the compiled read path (``_fastread.c``): see that file and ``loadtests.client.raw_body``."""

from typing import Any

SOURCE_SHA: str
"""sha256 of the ``_fastread.c`` this was built from (a stale build is found by comparing)."""
MAX_READ: int
"""The largest read size a ``Reader`` takes (its one receive buffer)."""

class Reader:
    """One raw body's reads: in C where a read is one plain chunk of one ordinary data frame, else
    handed to the Python path (``RawBody.take_read``, ``take_fed``) at a point where nothing differs."""

    fast: int
    """Reads taken in C."""
    to_a: int
    """Reads handed whole to the Python path."""
    to_b: int
    """Reads handed to the Python path once fed to llhttp."""

    def __init__(self, body: Any, muxed: Any = None) -> None: ...
    def __call__(self) -> bool:
        """``MuxedBody.readable``'s contract (a Reader made with its ``muxed``)."""
    def take_read(self, data: bytes, arrived: float | None, read_at: float) -> bool:
        """``RawBody.take_read``'s contract, without a socket."""

def _arrival(sec: int, nsec: int, wall: float, read_at: float) -> float:
    """``recv_stamped``'s arrival: ``min(read_at, sec + nsec * 1e-9 - (wall - read_at))``."""

def _judge(tracker: Any, data: str, t: float) -> str | None:
    """``tracker._judge_data(data, t)`` as the compiled reader judges a data frame's text: "data", with
    its writes made (the first token's time ``t``, the finish reason), or None with nothing written
    (the reader hands such a frame to the Python path)."""
