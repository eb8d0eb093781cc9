import os, resource, tempfile, time, zmq
def rss():
    return int(open("/proc/self/statm").read().split()[1]) * resource.getpagesize()
ctx = zmq.Context(); ctx.set(zmq.MAX_SOCKETS, 10000)
d = tempfile.mkdtemp()
N = 500
pubs, subs = [], []
r0 = rss()
for i in range(N):
    p = ctx.socket(zmq.PUB); p.bind(f"ipc://{d}/{i}.pub"); pubs.append(p)
r1 = rss()
for i in range(N):
    s = ctx.socket(zmq.SUB); s.setsockopt(zmq.SUBSCRIBE, b"samples"); s.connect(f"ipc://{d}/{i}.pub"); subs.append(s)
time.sleep(1.0)
r2 = rss()
body = b"x" * 2000
for _ in range(3):
    for p in pubs: p.send_multipart([b"samples", body])
    time.sleep(0.3)
    for s in subs:
        while s.poll(0): s.recv_multipart()
r3 = rss()
print(f"per PUB bound: {(r1-r0)/N/1024:.1f} KiB; per SUB connected (both ends): {(r2-r1)/N/1024:.1f} KiB; after 3 messages each: {(r3-r2)/N/1024:.1f} KiB more; zmq {zmq.zmq_version()} draft={zmq.DRAFT_API}")
