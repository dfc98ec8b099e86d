#!/usr/bin/python3
"""The files of a directory, served again through FUSE: a filesystem the tests can make
stop answering, as a network or FUSE-backed image does when its server hangs.

    fuse_images.py BACKING_DIR MOUNTPOINT CONTROL_DIR

Every read, write and fsync goes to this process (direct_io: no page cache in between).
While CONTROL_DIR/hang exists, every read, write and fsync waits for ever (the filesystem
hangs); while CONTROL_DIR/slow exists, every write first waits SLOW_MS milliseconds
(default 3000), and CONTROL_DIR/slow-writes counts those waiting. CONTROL_DIR/bad-NAME
lists byte ranges of image NAME, one "START END" a line, that are unreadable as a disk's
pending sectors are: a read touching one fails with EIO, and a write over part of one
makes that part readable again (the file is rewritten without it). (Files, not signals:
the main thread sits in libfuse's loop, where Python's signal handlers never run.) Runs in
the foreground until killed; the tests unmount it and kill it by PID.
"""

import errno
import os
import sys
import threading
import time

from fusepy import FUSE, FuseOSError, Operations

SLOW_S = int(os.environ.get("SLOW_MS", "3000")) / 1000.0
SLOW_LOCK = threading.Lock()
SLOW_WAITING = [0]
BAD_LOCK = threading.Lock()


class Images(Operations):
    def __init__(self, root, control):
        self.root = root
        self.control = control

    def _path(self, path):
        return os.path.join(self.root, path.lstrip("/"))

    def _count_slow(self, delta):
        with SLOW_LOCK:
            SLOW_WAITING[0] += delta
            tmp = os.path.join(self.control, "slow-writes.tmp")
            with open(tmp, "w") as f:
                f.write(str(SLOW_WAITING[0]))
            os.rename(tmp, os.path.join(self.control, "slow-writes"))

    def _gate(self, slow):
        if os.path.exists(os.path.join(self.control, "hang")):
            threading.Event().wait()  # never set: this request is never answered
        if slow and os.path.exists(os.path.join(self.control, "slow")):
            self._count_slow(1)
            time.sleep(SLOW_S)
            self._count_slow(-1)

    def _bad_file(self, path):
        return os.path.join(self.control, "bad-" + path.lstrip("/"))

    def _bad(self, path):
        try:
            with open(self._bad_file(path)) as f:
                return [tuple(int(x) for x in line.split()) for line in f if line.strip()]
        except FileNotFoundError:
            return []

    def _unreadable(self, path, start, end):
        with BAD_LOCK:
            return any(s < end and start < e for s, e in self._bad(path))

    def _written(self, path, start, end):
        with BAD_LOCK:
            bad = self._bad(path)
            if not bad:
                return
            left = []
            for s, e in bad:
                left += [r for r in ((s, min(e, start)), (max(s, end), e)) if r[0] < r[1]]
            tmp = self._bad_file(path) + ".tmp"
            with open(tmp, "w") as f:
                f.writelines("%d %d\n" % r for r in left)
            os.rename(tmp, self._bad_file(path))

    def getattr(self, path, fh=None):
        try:
            st = os.lstat(self._path(path))
        except OSError as e:
            raise FuseOSError(e.errno)
        keys = ("st_mode", "st_size", "st_uid", "st_gid", "st_nlink",
                "st_atime", "st_mtime", "st_ctime")
        return {k: getattr(st, k) for k in keys}

    def readdir(self, path, fh):
        return [".", ".."] + sorted(os.listdir(self.root))

    def open(self, path, flags):
        # The backing files take buffered I/O: O_DIRECT stays on this side.
        return os.open(self._path(path), flags & ~(os.O_DIRECT | os.O_CREAT | os.O_EXCL))

    def read(self, path, size, offset, fh):
        self._gate(False)
        if self._unreadable(path, offset, offset + size):
            raise FuseOSError(errno.EIO)
        return os.pread(fh, size, offset)

    def write(self, path, data, offset, fh):
        self._gate(True)
        n = os.pwrite(fh, data, offset)
        self._written(path, offset, offset + n)
        return n

    def fsync(self, path, datasync, fh):
        self._gate(False)
        os.fsync(fh)
        return 0

    def flush(self, path, fh):
        return 0

    def release(self, path, fh):
        os.close(fh)
        return 0

    def truncate(self, path, length, fh=None):
        os.truncate(self._path(path), length)

    def statfs(self, path):
        st = os.statvfs(self.root)
        keys = ("f_bavail", "f_bfree", "f_blocks", "f_bsize", "f_favail",
                "f_ffree", "f_files", "f_flag", "f_frsize", "f_namemax")
        return {k: getattr(st, k) for k in keys}


def main():
    if len(sys.argv) != 4:
        sys.exit("usage: fuse_images.py BACKING_DIR MOUNTPOINT CONTROL_DIR")
    FUSE(Images(sys.argv[1], sys.argv[3]), sys.argv[2], foreground=True, nothreads=False,
         direct_io=True, allow_other=True)


if __name__ == "__main__":
    main()
