"""Running a command on a pseudo-terminal, as a user at a terminal would see it (shared by tests)."""

from __future__ import annotations

import os
import pty
import select
import time


def run_in_pty(argv: list[str], env: dict[str, str], timeout: float, columns: int | None = None) -> tuple[int, str]:
    """Run argv with stdout and stderr on a pseudo-terminal (`columns` wide when given); (exit code, output)."""
    pid, fd = pty.fork()
    if pid == 0:  # child
        if columns is not None:
            import fcntl
            import struct
            import termios

            fcntl.ioctl(1, termios.TIOCSWINSZ, struct.pack("HHHH", 40, columns, 0, 0))
        os.execvpe(argv[0], argv, env)
    chunks: list[bytes] = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        ready, _, _ = select.select([fd], [], [], 0.5)
        if ready:
            try:
                data = os.read(fd, 65536)
            except OSError:
                break
            if not data:
                break
            chunks.append(data)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status), b"".join(chunks).decode(errors="replace")
