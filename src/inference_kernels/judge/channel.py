"""One framed, bounded channel between the referee and a worker: JSON plus descriptors.

A frame is an 8-byte header (JSON length, descriptor count), sent together with the
descriptors (SCM_RIGHTS), then the JSON body. The reader bounds the body and the
descriptor count, waits with a deadline, and turns anything malformed into
``ProtocolError``: a worker is untrusted, so nothing it sends is unpickled or trusted to
be well formed.
"""

from __future__ import annotations

import array
import json
import os
import select
import socket
import struct
import time
from collections.abc import Callable
from typing import Any

_HEADER = struct.Struct("<II")
MAX_BODY = 32 << 20  # bytes of JSON in one message
MAX_FDS = 64
# What the referee spends reading a message is no part of any sample's time (it reads after
# the message has arrived), and before the next sample the device rests while it reads
# (sampling.SAMPLE_GAP_SECONDS): a worker that padded its replies would rest the device
# longer than the gap (a key repeated 120,000 times: 1.4 MB, 50-95 ms of parsing; a
# review of 962fd84). Compact JSON, as ``send`` writes it, has no whitespace outside its
# strings, no key twice and no long number, so a message with a key twice or a number of
# more characters than MAX_NUMBER is refused, and so is a worker's with more whitespace
# than its texts could hold (a referee's init carries solution sources); what is left to
# pad is content that is checked.
MAX_WHITESPACE = 64 << 10  # bytes (a Failed's error text is at most 4,000 characters)
MAX_NUMBER = 32  # characters of one number: 2**48 has 15 digits, a float repr at most 24
_WHITESPACE = b" \t\n\r"


class ChannelClosed(EOFError):
    """The other end has gone (its process died or closed the socket)."""


class ChannelTimeout(TimeoutError):
    """Nothing (or not all of a message) arrived before the deadline."""


class ProtocolError(ValueError):
    """A message that is not a bounded JSON object with at most MAX_FDS descriptors."""


def pair() -> tuple[socket.socket, socket.socket]:
    return socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)


def close_fds(fds: list[int]) -> None:
    for fd in fds:
        try:
            os.close(fd)
        except OSError:
            pass


class Channel:
    def __init__(self, sock: socket.socket, compact: bool = False):
        self.sock = sock
        # the messages read are a worker's (WorkerHandle): refused when padded with whitespace
        self.compact = compact
        # time.perf_counter() when the last message had arrived whole. Not when its header
        # came: a worker that sent the header at once and the body after its calls made
        # the referee's outside time of a sample nil, and any time it reported passed.
        self.arrived = 0.0

    @classmethod
    def from_fd(cls, fd: int) -> Channel:
        return cls(socket.socket(fileno=fd))

    def fileno(self) -> int:
        return self.sock.fileno()

    def close(self) -> None:
        self.sock.close()

    def send(self, message: dict[str, Any], fds: list[int] = (), timeout: float = 60.0) -> None:
        body = json.dumps(message, separators=(",", ":")).encode()
        header = _HEADER.pack(len(body), len(fds))
        ancillary = [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds))] if fds else []
        self.sock.settimeout(timeout)
        try:
            sent = self.sock.sendmsg([header], ancillary)
            if sent < len(header):
                self.sock.sendall(header[sent:])
            self.sock.sendall(body)
        except (BrokenPipeError, ConnectionResetError) as error:
            raise ChannelClosed(str(error)) from None
        except TimeoutError:
            raise ChannelTimeout("the other end stopped reading") from None

    def _wait(self, deadline: float | None) -> None:
        remaining = None if deadline is None else deadline - time.monotonic()
        if remaining is not None and remaining <= 0:
            raise ChannelTimeout("no message before the deadline")
        poller = select.poll()
        poller.register(self.sock, select.POLLIN | select.POLLHUP | select.POLLERR)
        if not poller.poll(None if remaining is None else max(1, int(remaining * 1000))):
            raise ChannelTimeout("no message before the deadline")

    def _read(self, count: int, deadline: float | None, fds: list[int] | None) -> bytes:
        """``count`` bytes; descriptors come with the first chunk when ``fds`` is a list."""
        chunks, have = [], 0
        while have < count:
            self._wait(deadline)
            self.sock.settimeout(None)
            try:
                if fds is not None and have == 0:
                    data, received, flags, _ = socket.recv_fds(self.sock, count, MAX_FDS)
                    fds.extend(received)
                    if flags & socket.MSG_CTRUNC:
                        raise ProtocolError(f"more than {MAX_FDS} descriptors in one message")
                else:
                    data = self.sock.recv(min(count - have, 1 << 20))
            except ConnectionResetError:
                data = b""
            if not data:
                raise ChannelClosed("the other end closed the channel")
            chunks.append(data)
            have += len(data)
        return b"".join(chunks)

    def recv(
        self, deadline: float | None = None, arrival: Callable[[], None] | None = None
    ) -> tuple[dict[str, Any], list[int]]:
        """The next message and its descriptors (owned by the caller); ``arrival`` is called
        as soon as the whole message is here, before anything of it is read."""
        fds: list[int] = []
        try:
            header = self._read(_HEADER.size, deadline, fds)
            length, count = _HEADER.unpack(header)
            if length > MAX_BODY:
                raise ProtocolError(f"a message of {length} bytes (at most {MAX_BODY})")
            if count != len(fds):
                raise ProtocolError(f"announced {count} descriptors, passed {len(fds)}")
            body = self._read(length, deadline, None)
            self.arrived = time.perf_counter()
            if arrival is not None:
                arrival()
            if self.compact and len(body) - len(body.translate(None, _WHITESPACE)) > MAX_WHITESPACE:
                raise ProtocolError("a message padded with whitespace")
            try:
                message = json.loads(
                    body, object_pairs_hook=_object, parse_int=_int, parse_float=_float
                )
            except ProtocolError:
                raise
            except (ValueError, RecursionError):  # JSON and Unicode errors, int digits
                raise ProtocolError("a message that is not JSON") from None
            if not isinstance(message, dict):
                raise ProtocolError("a message that is not a JSON object")
            return message, fds
        except BaseException:
            close_fds(fds)
            raise


def _object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    made = dict(pairs)
    if len(made) != len(pairs):
        raise ProtocolError("a message with a key given twice")
    return made


def _number(text: str) -> str:
    if len(text) > MAX_NUMBER:
        raise ProtocolError(f"a number of {len(text)} characters")
    return text


def _int(text: str) -> int:
    return int(_number(text))


def _float(text: str) -> float:
    return float(_number(text))
