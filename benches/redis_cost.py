#!/usr/bin/env python3
"""What a run costs the Redis it locks on (BENCHMARKS.md § Redis cost per run).

    python3 benches/redis_cost.py [--server redis-server] [--bin target/release/redlock-run]
                                  [--runs 300] [--fleet 1000] [--queued 100]
                                  [--jitter 5s] [--only-fleet]

Starts its own server (redis-server, or a valkey-server given with --server) on a free
loopback port, without persistence, and measures from the server's own counters, side by side
with the floor: a client that connects, sends `SET key token NX PX ttl`, a compare-and-delete by
EVALSHA, and closes. Per run: server CPU (INFO cpu, main thread), time inside commands (the sum
of INFO commandstats usec, scripts' inner commands included, as for the floor) and commands run;
the longest script calls (SLOWLOG, every call logged); and the fleet minute: N clients started
within one second, on N keys and on one key. With --jitter (or --only-fleet), a fleet's cron
tick, N runs released at one instant, without and with `--jitter DUR`, and its peaks beside its
CPU: the most clients connected at once, the most commands run in 100 ms and the longest the
key's queue got (sampled in a pass of their own, so that the sampling is not in the CPU
figure). Prints Markdown.
"""

import argparse
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

CAD = "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Resp:
    """A minimal RESP2 client: enough for INFO, SLOWLOG, CONFIG and the floor's commands."""

    def __init__(self, port):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=10)
        self.buf = b""

    def close(self):
        self.sock.close()

    def _line(self):
        while b"\r\n" not in self.buf:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise ConnectionError("closed")
            self.buf += chunk
        line, self.buf = self.buf.split(b"\r\n", 1)
        return line

    def _read(self):
        line = self._line()
        kind, rest = line[:1], line[1:]
        if kind in (b"+", b"-"):
            return rest.decode()
        if kind == b":":
            return int(rest)
        if kind == b"$":
            n = int(rest)
            if n < 0:
                return None
            while len(self.buf) < n + 2:
                self.buf += self.sock.recv(65536)
            data, self.buf = self.buf[:n], self.buf[n + 2:]
            return data
        if kind == b"*":
            n = int(rest)
            return None if n < 0 else [self._read() for _ in range(n)]
        raise ValueError(line)

    def call(self, *args):
        out = b"*%d\r\n" % len(args)
        for a in args:
            a = a if isinstance(a, bytes) else str(a).encode()
            out += b"$%d\r\n%s\r\n" % (len(a), a)
        self.sock.sendall(out)
        return self._read()


class Server:
    def __init__(self, binary):
        self.dir = tempfile.mkdtemp(prefix="redis-cost-")
        self.port = free_port()
        self.proc = subprocess.Popen(
            [binary, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
             "--dir", self.dir],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.time() + 10
        while True:
            try:
                self.admin = Resp(self.port)
                if self.admin.call("PING") == "PONG":
                    break
            except OSError:
                if time.time() > deadline:
                    raise
                time.sleep(0.02)
        info = self.info("server")
        self.version = info.get("valkey_version") and "Valkey " + info["valkey_version"] or \
            "Redis " + info["redis_version"]

    def stop(self):
        self.proc.kill()
        self.proc.wait()
        shutil.rmtree(self.dir, ignore_errors=True)

    def info(self, section):
        text = self.admin.call("INFO", section).decode()
        return dict(l.split(":", 1) for l in text.splitlines() if ":" in l and not l.startswith("#"))

    def counters(self):
        cpu = self.info("cpu")
        main = float(cpu.get("used_cpu_sys_main_thread", cpu["used_cpu_sys"])) + \
            float(cpu.get("used_cpu_user_main_thread", cpu["used_cpu_user"]))
        calls = usec = 0
        for name, v in self.info("commandstats").items():
            fields = dict(f.split("=") for f in v.split(","))
            if name in ("cmdstat_info", "cmdstat_slowlog", "cmdstat_config", "cmdstat_ping"):
                continue
            calls += int(fields["calls"])
            usec += int(fields["usec"])
        return main, usec, calls

    def reset(self, slowlog=False):
        # Logging every call costs the server time of its own: only in the passes that read it.
        self.admin.call("CONFIG", "SET", "slowlog-log-slower-than", "0" if slowlog else "-1")
        self.admin.call("CONFIG", "SET", "slowlog-max-len", "100000")
        self.admin.call("SLOWLOG", "RESET")
        self.admin.call("CONFIG", "RESETSTAT")

    def scripts(self):
        """Durations (us) of the script calls logged since the last reset."""
        entries = self.admin.call("SLOWLOG", "GET", "-1") or []
        return [e[2] for e in entries if e[3] and e[3][0].upper() in (b"EVALSHA", b"EVAL", b"EVAL_RO")]


def floor(port, key, token, command=False):
    c = Resp(port)
    got = c.call("SET", key, token, "NX", "PX", 30000)
    if command:
        subprocess.run(["true"], check=True)
    if got == "OK":
        c.call("EVALSHA", SHA, 1, key, token)
    c.close()


def measure(server, runs, slowlog_runs, subjects, blocks=6):
    """Counters per run of each subject (name → one(i)), in blocks taken in turn so that all
    see the same machine, then the durations of the script calls of `slowlog_runs` more runs
    of each."""
    totals = {name: [0.0, 0, 0] for name in subjects}
    per_block = max(1, runs // blocks)
    i = 0
    for _ in range(blocks):
        for name, one in subjects.items():
            server.reset()
            cpu0, usec0, calls0 = server.counters()
            for _ in range(per_block):
                one(i)
                i += 1
            cpu1, usec1, calls1 = server.counters()
            t = totals[name]
            t[0] += cpu1 - cpu0
            t[1] += usec1 - usec0
            t[2] += calls1 - calls0
    out = {}
    for name, one in subjects.items():
        server.reset(slowlog=True)
        for _ in range(slowlog_runs):
            one(i)
            i += 1
        n = per_block * blocks
        cpu, usec, calls = totals[name]
        out[name] = {"cpu_us": cpu * 1e6 / n, "usec": usec / n, "calls": calls / n,
                     "scripts": sorted(server.scripts())}
    return out


def pct(values, p):
    if not values:
        return 0
    return values[min(len(values) - 1, int(len(values) * p / 100))]


def wrapper(bin_, port, *args):
    return [bin_, "--redis-url", f"redis://127.0.0.1:{port}", *args]


def handoffs(server, bin_, queued, slowlog=False):
    """A holder, `queued` waiters queued behind it, then released: counters per run."""
    key = "cost:queue"
    go = os.path.join(server.dir, "go")
    if os.path.exists(go):
        os.unlink(go)
    server.reset(slowlog)
    cpu0, usec0, calls0 = server.counters()
    holder = subprocess.Popen(wrapper(bin_, server.port, "-k", key, "--", "sh", "-c",
                                      f"while [ ! -e {go} ]; do sleep 0.01; done"))
    deadline = time.time() + 10
    while server.admin.call("EXISTS", key) != 1 and time.time() < deadline:
        time.sleep(0.01)
    waiters = [subprocess.Popen(wrapper(bin_, server.port, "-k", key, "--wait", "120s", "--", "true"))
               for _ in range(queued)]
    deadline = time.time() + 30
    while server.admin.call("ZCARD", "{%s}:queue" % key) < queued and time.time() < deadline:
        time.sleep(0.01)
    open(go, "w").close()
    for p in [holder] + waiters:
        p.wait(timeout=120)
    cpu1, usec1, calls1 = server.counters()
    runs = queued + 1
    return {"cpu_us": (cpu1 - cpu0) * 1e6 / runs, "usec": (usec1 - usec0) / runs,
            "calls": (calls1 - calls0) / runs, "scripts": sorted(server.scripts())}


def fleet(server, start, n):
    """`n` clients started within one second: server CPU in all, and the time until all ended."""
    server.reset()
    cpu0, _, _ = server.counters()
    t0 = time.time()
    procs = []
    threads = []
    for i in range(n):
        target = t0 + i / n
        pause = target - time.time()
        if pause > 0:
            time.sleep(pause)
        p = start(i)
        if isinstance(p, threading.Thread):
            threads.append(p)
        else:
            procs.append(p)
    for p in procs:
        p.wait(timeout=120)
    for t in threads:
        t.join(timeout=120)
    elapsed = time.time() - t0
    cpu1, _, _ = server.counters()
    return cpu1 - cpu0, elapsed


class Peaks(threading.Thread):
    """While a fleet runs, every 5 ms: the most clients connected at once (the admin's and the
    sampler's own connections not counted), the longest `queue` (a sorted set) got, and the most
    commands the server ran in 100 ms (total_commands_processed: a script's inner commands
    too; the sampler's own three a sample not counted)."""

    def __init__(self, port, queue):
        super().__init__(daemon=True)
        self.conn, self.queue = Resp(port), queue
        self.done = threading.Event()
        self.clients = self.queued = 0
        self.served = []

    def run(self):
        while not self.done.is_set():
            info = self.conn.call("INFO", "clients").decode() + self.conn.call("INFO", "stats").decode()
            clients = int(re.search(r"connected_clients:(\d+)", info).group(1)) - 2
            total = int(re.search(r"total_commands_processed:(\d+)", info).group(1))
            self.served.append((time.monotonic(), total))
            self.clients = max(self.clients, clients)
            self.queued = max(self.queued, self.conn.call("ZCARD", self.queue) or 0)
            time.sleep(0.005)

    def stop(self):
        self.done.set()
        self.join()
        self.conn.close()
        busiest, j = 0, 0
        for i, (t, total) in enumerate(self.served):
            j = max(j, i)
            while j < len(self.served) and self.served[j][0] - t < 0.1:
                j += 1
            if j == len(self.served):
                break
            busiest = max(busiest, (self.served[j][1] - total - 3 * (j - i)) * 0.1 / (self.served[j][0] - t))
        return self.clients, self.queued, busiest


def cron_tick(server, argv, n, peaks=None):
    """`n` runs of `argv(i)` released at one instant, as a cron tick on every host of a fleet
    starts them: each is a shell, already started, that stops itself and execs the wrapper once
    continued. Server CPU from the tick to the last exit, and the time that took."""
    procs = [subprocess.Popen(["sh", "-c", 'kill -STOP $$; exec "$@"', "sh", *argv(i)],
                              stderr=subprocess.DEVNULL) for i in range(n)]
    wait_for(lambda: all(_stopped(p.pid) for p in procs), 120)
    server.reset()
    cpu0, _, _ = server.counters()
    if peaks:
        peaks.start()
    t0 = time.time()
    for p in procs:
        os.kill(p.pid, signal.SIGCONT)
    for p in procs:
        p.wait(timeout=300)
    elapsed = time.time() - t0
    cpu1, _, _ = server.counters()
    return cpu1 - cpu0, elapsed


def _stopped(pid):
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()[0] == "T"


def spread_fleet(server, bin_, n, jitter):
    """The fleet's cron tick with and without `--jitter`: per shape, server CPU and the time
    until all ended (one pass), then the peaks (another)."""
    shapes = [
        ("one key each", lambda i: "cost:spread:%d" % i, []),
        ("all on one key", lambda i: "cost:spread-herd", []),
        ("all on one key, `--wait 2m`", lambda i: "cost:spread-queue", ["--wait", "2m"]),
    ]
    print(f"Fleet minute, spread: {n} runs released by one cron tick, without and with `--jitter {jitter}` "
          "(CPU and the time to the last exit from one pass; the peaks, sampled every 5 ms, from another).\n")
    print("| runs | server CPU in all | all ended after | peak clients connected | peak commands in 100 ms "
          "| peak queue |")
    print("|---|---|---|---|---|---|")
    for label, key, extra in shapes:
        for spread in ([], ["--jitter", jitter]):
            def argv(i, key=key, extra=extra, spread=spread):
                return wrapper(bin_, server.port, "-k", key(i), *extra, *spread, "--", "true")
            cpu, elapsed = cron_tick(server, argv, n)
            peaks = Peaks(server.port, "{%s}:queue" % key(0))
            cron_tick(server, argv, n, peaks)
            clients, queued, busiest = peaks.stop()
            name = f"{label}, `--jitter {jitter}`" if spread else label
            print(f"| {name} | {cpu * 1000:.0f} ms | {elapsed:.2f} s | {clients} | {busiest:.0f} | {queued} |",
                  flush=True)
    print()


def longest(server, label, action):
    """The longest script call while `action` runs, with SLOWLOG logging every call."""
    server.reset(slowlog=True)
    action()
    calls = sorted(server.scripts())
    return label, len(calls), pct(calls, 50), pct(calls, 99), (calls[-1] if calls else 0)


def wait_for(cond, limit=60):
    deadline = time.time() + limit
    while not cond():
        if time.time() > deadline:
            raise TimeoutError("the shape did not come about in time")
        time.sleep(0.02)


def shapes(server, bin_, n):
    """The large shapes: the longest single script call of each."""
    # Commands that hold until the FIFO is opened for writing and closed: nothing polls.
    go = os.path.join(server.dir, "go-shapes")
    os.mkfifo(go)
    hold = ["sh", "-c", f"cat < {go} > /dev/null"]

    def let_go(procs):
        fd = os.open(go, os.O_RDWR)
        os.close(os.open(go, os.O_WRONLY))
        os.close(fd)
        for p in procs:
            p.wait(timeout=300)
    rows = []
    keys = []
    for i in range(64):
        keys += ["-k", "cost:many:%d" % i]
    rows.append(longest(server, "64 keys at once: acquire and release",
                        lambda: subprocess.run(wrapper(bin_, server.port, *keys, "--", "true"), check=True)))

    def queue_of(kind_args, key):
        holder = subprocess.Popen(wrapper(bin_, server.port, "-k", key, *kind_args, "--", *hold))
        wait_for(lambda: server.admin.call("EXISTS", key) == 1)
        waiters = [subprocess.Popen(wrapper(bin_, server.port, "-k", key, "--wait", "300s", "--", "true"),
                                    stderr=subprocess.DEVNULL) for _ in range(n)]
        wait_for(lambda: server.admin.call("ZCARD", "{%s}:queue" % key) >= n, 120)
        return holder, waiters

    holder, waiters = queue_of([], "cost:long")
    rows.append(longest(server, f"{n} waiters queued: their keep-alives for 2 s", lambda: time.sleep(2)))
    rows.append(longest(server, f"{n} waiters queued: a run that does not wait (busy)", lambda: subprocess.run(
        wrapper(bin_, server.port, "-k", "cost:long", "--", "true"), stderr=subprocess.DEVNULL)))

    rows.append(longest(server, f"{n} waiters queued: the release and every handoff",
                        lambda: let_go([holder] + waiters)))

    holders = [subprocess.Popen(wrapper(bin_, server.port, "-k", "cost:sem", "--limit", str(n + 1), "--", *hold))
               for _ in range(n)]
    wait_for(lambda: server.admin.call("ZCARD", "cost:sem") >= n, 120)
    rows.append(longest(server, f"`--limit {n + 1}` with {n} holders: one more run, and one that checks "
                        "`--idempotency-key`", lambda: [subprocess.run(
                            wrapper(bin_, server.port, "-k", "cost:sem", "--limit", str(n + 1), *extra, "--", "true"),
                            stderr=subprocess.DEVNULL) for extra in ([], ["--idempotency-key", "x"])]))
    rows.append(longest(server, f"`--limit {n + 1}` with {n} holders: their releases",
                        lambda: let_go(holders)))

    # A queue of lapsed entries, as waiters that died leave it (their entries end in the past).
    past = int(time.time() * 1000) - 10_000
    for i in range(n):
        member = "%032x host %d 0" % (i, i)
        server.admin.call("ZADD", "{cost:lapsed}:queue", i + 1, member)
        server.admin.call("ZADD", "{cost:lapsed}:queue:expiry", past, member)
    rows.append(longest(server, f"a queue of {n} lapsed entries: the next run (`--wait 10s`)",
                        lambda: subprocess.run(wrapper(bin_, server.port, "-k", "cost:lapsed", "--wait", "10s",
                                                       "--", "true"), check=True)))
    print(f"Large shapes ({n} waiters or holders): the script calls while each runs (SLOWLOG, wall "
          "time: the longest include the server waiting for a CPU among thousands of processes).\n")
    print("| shape | script calls | p50 | p99 | longest |")
    print("|---|---|---|---|---|")
    for label, count, median, p99, top in rows:
        print(f"| {label} | {count} | {median} µs | {p99} µs | {top} µs |")
    print()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--server", default="redis-server")
    ap.add_argument("--bin", default="target/release/redlock-run")
    ap.add_argument("--baseline", help="another redlock-run binary, measured beside --bin")
    ap.add_argument("--runs", type=int, default=300)
    ap.add_argument("--slowlog-runs", type=int, default=1000)
    ap.add_argument("--fleet", type=int, default=1000)
    ap.add_argument("--queued", type=int, default=100)
    ap.add_argument("--shapes", type=int, default=0, help="also the large shapes, with this many waiters")
    ap.add_argument("--only-shapes", action="store_true")
    ap.add_argument("--jitter", help="also a cron tick's fleet without and with --jitter DUR")
    ap.add_argument("--only-fleet", action="store_true", help="only the cron tick's fleet (--jitter, or 5s)")
    a = ap.parse_args()
    server = Server(a.server)
    global SHA
    SHA = server.admin.call("SCRIPT", "LOAD", CAD).decode()
    bin_ = a.bin
    # Load the tool's scripts once, as a long-lived Redis would have them.
    subprocess.run(wrapper(bin_, server.port, "-k", "cost:warm", "--", "true"), check=True)
    try:
        if a.only_shapes:
            shapes(server, bin_, a.shapes or 1000)
            return
        if a.only_fleet:
            spread_fleet(server, bin_, a.fleet, a.jitter or "5s")
            return
        subjects = {
            "floor (SET NX PX, compare-and-delete)": lambda i: floor(server.port, "cost:floor", "t%d" % i),
            "floor, `true` run in between": lambda i: floor(server.port, "cost:floor", "t%d" % i, True),
        }
        bins = [("`redlock-run -- true`", bin_)]
        if a.baseline:
            bins.insert(0, ("baseline `redlock-run -- true`", a.baseline))
            subprocess.run(wrapper(a.baseline, server.port, "-k", "cost:warm", "--", "true"), check=True)
        for name, b in bins:
            subjects[name] = lambda i, b=b: subprocess.run(wrapper(b, server.port, "-k", "cost:one", "--", "true"),
                                                         check=True)
        m = measure(server, a.runs, a.slowlog_runs, subjects)
        rows = list(m.items())
        for name, b in bins:
            q = handoffs(server, b, a.queued)
            q["scripts"] = handoffs(server, b, a.queued, slowlog=True)["scripts"]
            rows.append((f"{name.replace(' -- true', '')}: handoff, {a.queued} queued", q))
        print(f"### {server.version}: {a.runs} runs each in alternating blocks (script calls: "
              f"{a.slowlog_runs} more); the handoffs: {a.queued} waiters queued\n")
        print("| per run | server CPU | time inside commands | commands run | script calls p50 / p99 / max |")
        print("|---|---|---|---|---|")
        for name, r in rows:
            s = r["scripts"]
            calls = f"{pct(s, 50)} / {pct(s, 99)} / {s[-1]} µs" if s else "—"
            print(f"| {name} | {r['cpu_us']:.0f} µs | {r['usec']:.1f} µs | {r['calls']:.1f} | {calls} |")
        f, u = m["floor (SET NX PX, compare-and-delete)"], m["`redlock-run -- true`"]
        q = rows[-1][1]
        print(f"\nRatios: CPU {u['cpu_us'] / f['cpu_us']:.2f}× the floor's, time inside commands "
              f"{u['usec'] / f['usec']:.2f}×; a handoff costs {q['cpu_us'] / u['cpu_us']:.2f}× an "
              f"uncontended run's CPU.\n")
        if a.shapes:
            shapes(server, bin_, a.shapes)
        print(f"Fleet minute: {a.fleet} clients started within one second.\n")
        print("| clients | server CPU in all | all ended after |")
        print("|---|---|---|")
        fl = lambda key: (lambda i: threading.Thread(target=floor, args=(server.port, key(i), "t%d" % i)))
        def runs_of(b, key):
            return lambda i: subprocess.Popen(wrapper(b, server.port, "-k", key(i), "--", "true"),
                                              stderr=subprocess.DEVNULL)
        fleet_rows = [("floor, one key each", lambda i: _started(fl(lambda j: "cost:fleet:%d" % j)(i)))]
        fleet_rows += [(f"{name.replace(' -- true', '')}, one key each", runs_of(b, lambda j: "cost:fleet:%d" % j))
                       for name, b in bins]
        fleet_rows += [("floor, all on one key", lambda i: _started(fl(lambda j: "cost:herd")(i)))]
        fleet_rows += [(f"{name.replace(' -- true', '')}, all on one key", runs_of(b, lambda j: "cost:herd"))
                       for name, b in bins]
        for name, start in fleet_rows:
            cpu, elapsed = fleet(server, start, a.fleet)
            print(f"| {name} | {cpu * 1000:.0f} ms | {elapsed:.2f} s |")
        if a.jitter:
            print()
            spread_fleet(server, bin_, a.fleet, a.jitter)
    finally:
        server.stop()


def _started(t):
    t.start()
    return t


if __name__ == "__main__":
    sys.exit(main())
