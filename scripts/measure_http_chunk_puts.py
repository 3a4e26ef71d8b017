"""Server CPU per HTTP chunk put: POST N distinct 1 MiB chunks to a running `spindle serve`
from THREADS connections, and print the rate and the CPU time (user + system) the server
process spent meanwhile, read from /proc/PID/stat (Linux).

    python3 scripts/measure_http_chunk_puts.py PORT N THREADS PID SEED

SEED makes the chunks of one call distinct from another's (same SEED: the same chunks,
which the store already holds). Used for docs/benchmarks/chunks.md, "HTTP puts hash once".
"""
import http.client, os, sys, threading, time
port = int(sys.argv[1]); n = int(sys.argv[2]); threads = int(sys.argv[3]); pid = int(sys.argv[4]); seed = int(sys.argv[5])
size = 1 << 20
pool = os.urandom(8 << 20)
def body(i):
    s = (i * 7919 * 64) % (len(pool) - size)
    return (seed * 1_000_000 + i).to_bytes(8, 'little') + pool[s + 8:s + size]
def cpu():
    f = open(f'/proc/{pid}/stat').read().rsplit(')', 1)[1].split()
    return (int(f[11]) + int(f[12])) / os.sysconf('SC_CLK_TCK')
nxt = [0]; lock = threading.Lock(); errs = []
def work():
    c = http.client.HTTPConnection('127.0.0.1', port)
    while True:
        with lock:
            i = nxt[0]; nxt[0] += 1
        if i >= n: return
        c.request('POST', '/v1/chunks', body=body(i), headers={'Content-Type': 'application/octet-stream'})
        r = c.getresponse(); r.read()
        if r.status not in (200, 201): errs.append(r.status)
c0 = cpu(); t0 = time.time()
ts = [threading.Thread(target=work) for _ in range(threads)]
[t.start() for t in ts]; [t.join() for t in ts]
dt = time.time() - t0; dc = cpu() - c0
print(f'{n} puts {dt:.2f}s {n*size/dt/1e6:.0f} MB/s server cpu {dc:.2f}s = {dc/n*1e3:.3f} ms/put errors {len(errs)}')
