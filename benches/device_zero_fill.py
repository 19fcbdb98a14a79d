"""Durable direct writes beside a zero-filling thread (docs/performance.md,
"Two durable writes in flight, tried").

usage: [CHUNK=BYTES] python3 benches/device_zero_fill.py DIR [WRITE_BYTES] [ZERO_BYTES_PER_S]

Writes N durable direct writes (O_DIRECT + RWF_DSYNC, queue depth 1) of
WRITE_BYTES into zero-filled space of a file in DIR, alone, then beside a
thread that prepares space the way the log's preparing thread does (1 MiB
chunks: fallocate, O_DIRECT writes of zeros in 256 KiB pieces, fdatasync)
at ZERO_BYTES_PER_S, then alone again; prints writes/s and µs per write for
each. Linux only; DIR must be on a file system that takes O_DIRECT. Bounded:
N writes per phase.
"""
import mmap
import os
import sys
import threading
import time

N = 3000
CHUNK = int(os.environ.get("CHUNK", 1 << 20))  # bytes per prepared chunk
PIECE = 256 * 1024


def main():
    directory = sys.argv[1]
    size = int(sys.argv[2]) if len(sys.argv) > 2 else 40960
    rate = float(sys.argv[3]) if len(sys.argv) > 3 else 50e6
    path = os.path.join(directory, "device_zero_fill.data")
    zero_path = os.path.join(directory, "device_zero_fill.zeros")
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
    zeros = mmap.mmap(-1, CHUNK)
    for offset in range(0, N * size + CHUNK, CHUNK):
        os.pwrite(fd, zeros, offset)
    os.fsync(fd)
    os.close(fd)
    fd = os.open(path, os.O_RDWR | os.O_DIRECT)
    stop = threading.Event()
    piece = mmap.mmap(-1, PIECE)  # page-aligned, as O_DIRECT needs

    def zero_fill():
        zfd = os.open(zero_path, os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_DIRECT, 0o644)
        offset = 0
        started = time.perf_counter()
        # Bounded: at most as many chunks as the three phases could need.
        while not stop.is_set() and offset < 64 * CHUNK * 1024:
            os.posix_fallocate(zfd, offset, CHUNK)
            for k in range(CHUNK // PIECE):
                os.pwrite(zfd, piece, offset + k * PIECE)
            os.fdatasync(zfd)
            offset += CHUNK
            ahead = offset / rate - (time.perf_counter() - started)
            if ahead > 0:
                time.sleep(ahead)
        os.close(zfd)
        os.unlink(zero_path)

    def run(label):
        data = mmap.mmap(-1, size)
        data.write(b"x" * size)
        started = time.perf_counter()
        for i in range(N):
            os.pwritev(fd, [data], i * size, os.RWF_DSYNC)
        took = time.perf_counter() - started
        print(f"{label}: {size} B: {N / took:7.0f} writes/s, {took / N * 1e6:6.0f} us/write", flush=True)

    run("alone")
    filler = threading.Thread(target=zero_fill)
    filler.start()
    time.sleep(0.2)
    run(f"beside {rate / 1e6:.0f} MB/s of zeros")
    stop.set()
    filler.join()
    run("alone")
    os.close(fd)
    os.unlink(path)


if __name__ == "__main__":
    main()
