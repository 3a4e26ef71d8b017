"""How a chunk volume's way of appending changes the disk's put rate: N records of 1 MiB
appended to 256 MiB files, as the chunk store appends to its volumes (one file at a time,
at most 16 records unsynced, 4 threads each `fdatasync`ing everything written so far),
by WRITERS threads, in one of these modes:

    plain     buffered writes into a file created empty (the store today)
    keepsize  the same, the file first preallocated with fallocate(FALLOC_FL_KEEP_SIZE)
    falloc    the same, the file first preallocated to its full size (posix_fallocate)
    direct    O_DIRECT writes of 4 KiB-aligned records into a file created empty

    python3 scripts/probe_volume_appends.py DIR N MODE [WRITERS]

Prints the mean time of one record's `pwrite`, MB/s from the first write to the last sync,
and the process's CPU time. Removes its files. Linux only. Used for
docs/benchmarks/chunks.md, "How a volume is appended to (2026-11-27)".
"""
import ctypes
import mmap
import os
import sys
import threading
import time

FALLOC_FL_KEEP_SIZE = 1
SIZE = 1 << 20
VOLUME = 256 << 20
UNSYNCED_MAX = 16
SYNCERS = 4

root, n, mode = sys.argv[1], int(sys.argv[2]), sys.argv[3]
writers = int(sys.argv[4]) if len(sys.argv) > 4 else 1
if mode not in ("plain", "keepsize", "falloc", "direct"):
    sys.exit(f"unknown mode {mode}")
libc = ctypes.CDLL(None, use_errno=True)
# Record header room as the store's (52 bytes), or a whole block for O_DIRECT.
stride = SIZE + (4096 if mode == "direct" else 52)
per_file = (VOLUME - 4096) // stride
buf = mmap.mmap(-1, stride)  # page aligned, as O_DIRECT needs
buf.write(os.urandom(stride))

cv = threading.Condition()
state = {"written": 0, "taken": 0, "synced": 0, "fd": None, "no": -1}
done_out_of_order = set()
next_record = [0]
write_seconds = [0.0]
paths = []


def open_volume(no):
    path = os.path.join(root, f"probe-volume.{no}")
    flags = os.O_RDWR | os.O_CREAT | os.O_TRUNC
    if mode == "direct":
        flags |= os.O_DIRECT
    fd = os.open(path, flags, 0o644)
    paths.append(path)
    if mode == "falloc":
        os.posix_fallocate(fd, 0, VOLUME)
    elif mode == "keepsize":
        if libc.fallocate(fd, FALLOC_FL_KEEP_SIZE, ctypes.c_long(0), ctypes.c_long(VOLUME)) != 0:
            sys.exit(f"fallocate: {os.strerror(ctypes.get_errno())}")
    return fd


def syncer():
    while True:
        with cv:
            while state["taken"] == state["written"] and state["taken"] < n:
                cv.wait()
            if state["taken"] >= n:
                return
            upto = state["written"]
            state["taken"] = upto
            fd = state["fd"]
        os.fdatasync(fd)
        with cv:
            state["synced"] = max(state["synced"], upto)
            cv.notify_all()


def writer():
    while True:
        with cv:
            i = next_record[0]
            if i >= n:
                return
            no = i // per_file
            if no != state["no"]:
                # A volume is sealed once everything in it is synced.
                while state["synced"] < i:
                    cv.wait()
                if state["no"] != no:
                    state["fd"] = open_volume(no)
                    state["no"] = no
            while i - state["synced"] >= UNSYNCED_MAX:
                cv.wait()
            next_record[0] = i + 1
            fd = state["fd"]
        t = time.perf_counter()
        os.pwrite(fd, buf, 4096 + (i % per_file) * stride)
        took = time.perf_counter() - t
        with cv:
            write_seconds[0] += took
            done_out_of_order.add(i)
            while state["written"] in done_out_of_order:
                done_out_of_order.discard(state["written"])
                state["written"] += 1
            cv.notify_all()


start, cpu0 = time.perf_counter(), os.times()
threads = [threading.Thread(target=syncer) for _ in range(SYNCERS)]
threads += [threading.Thread(target=writer) for _ in range(writers)]
for t in threads:
    t.start()
for t in threads:
    t.join()
seconds, cpu1 = time.perf_counter() - start, os.times()
print(
    f"{mode} writers={writers}: pwrite {write_seconds[0] / n * 1e3:.3f} ms per record, "
    f"{n * SIZE / seconds / 1e6:.0f} MB/s, CPU user {cpu1.user - cpu0.user:.2f} s "
    f"system {cpu1.system - cpu0.system:.2f} s",
    flush=True,
)
for path in paths:
    os.unlink(path)
