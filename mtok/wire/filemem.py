"""A file-backed stand-in for ``multiprocessing.shared_memory`` segments.

Some hosts have no ``/dev/shm`` (serverless sandboxes, some containers), and
there ``SharedMemory`` fails.  mtok then keeps its status board in a file in
the server's private 0700 socket directory, mapped with ``mmap`` by every
process: the same pages, the same lock-free single-writer layout, so nothing
that reads or writes the board changes.  (The server arguments, the other
segment, then travel over the process-start pipe instead; see ``mtok.wire.args``.)

:class:`FileSegment` has the part of ``SharedMemory``'s interface mtok uses:
``name``, ``size``, ``buf``, ``close()`` and ``unlink()``.
"""

from __future__ import annotations

import mmap
import os


class FileSegment:
    def __init__(self, path: str, create: bool = False, size: int = 0):
        flags = os.O_RDWR | (os.O_CREAT | os.O_EXCL if create else 0)
        fd = os.open(path, flags, 0o600)
        try:
            if create:
                os.ftruncate(fd, size)
            else:
                size = os.fstat(fd).st_size
            self._mmap = mmap.mmap(fd, size)
        finally:
            os.close(fd)
        self.name = path
        self.size = size
        self.buf = memoryview(self._mmap)

    def close(self) -> None:
        """Unmap; raises BufferError while a view of ``buf`` is still held, as SharedMemory does."""
        if self.buf is not None:
            self.buf.release()
            self.buf = None  # type: ignore[assignment]
        if self._mmap is not None:
            self._mmap.close()
            self._mmap = None  # type: ignore[assignment]

    def unlink(self) -> None:
        os.unlink(self.name)


def is_file_segment(name: str) -> bool:
    """Segment names have no slash; file-backed ones are paths."""
    return os.sep in name
