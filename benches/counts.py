#!/usr/bin/env python3
"""Counts what one uncontended `redlock-run --key k -- true` costs, in numbers that do not
depend on the machine's speed or load: the system calls of the run and its processes
(`strace -f -c`), their page faults (most of a start's time: getrusage's minor faults) and,
where valgrind runs, the instructions of the wrapper and its guardian (callgrind). With
--check, compares them with benches/budgets and fails when one is over its budget by more
than the margin written there (.ci/run does).

    python3 benches/counts.py [--check] [BINARY]     # default: target/release/redlock-run

It starts its own redis-server on a free loopback port (no persistence). The system calls and
page faults are the median of a few runs: a run that the scheduler happens to slow down opens
the key's watch (a command that lives past 25 ms gets one) and does more, and one whose
guardian is dismissed before it has set itself up (the command was that quick) does less;
the middle run is the run as it goes on an idle machine, the same on every machine. The
instructions, counted under valgrind, where every run is slow, are the least of theirs.
Waiting calls (epoll_wait, futex, ppoll, ...) are left out of the count: how often a process
wakes up is the scheduler's business.
"""

import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BUDGETS = os.path.join(ROOT, "benches", "budgets")
WAITS = {
    "epoll_wait", "epoll_pwait", "epoll_pwait2", "futex", "poll", "ppoll", "select",
    "pselect6", "nanosleep", "clock_nanosleep", "sched_yield", "wait4", "waitid",
}
RUNS = 7
VALGRIND_RUNS = 3


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_redis(workdir):
    port = free_port()
    server = subprocess.Popen(
        ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",
         "--appendonly", "no", "--dir", workdir],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for _ in range(200):
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2) as c:
                c.sendall(b"PING\r\n")
                if c.recv(16).startswith(b"+PONG"):
                    return server, port
        except OSError:
            time.sleep(0.025)
    server.kill()
    sys.exit("redis-server did not start")


def run_env():
    # The same environment everywhere: the command's PATH search and the wrapper's variables
    # are part of what is counted.
    return {"PATH": "/usr/bin:/bin", "LANG": "C"}


def syscalls(binary, url, workdir):
    out = os.path.join(workdir, "strace.txt")
    cmd = ["strace", "-f", "-c", "-o", out, binary, "--redis-url", url, "--key", "k", "--", "true"]
    subprocess.run(cmd, env=run_env(), check=True, timeout=60)
    counted, per = 0, {}
    for line in open(out):
        fields = line.split()
        # "% time seconds usecs/call calls [errors] syscall"
        if len(fields) < 5 or not fields[0][0].isdigit() or fields[-1] == "total":
            continue
        name, calls = fields[-1], int(fields[3])
        per[name] = calls
        if name not in WAITS:
            counted += calls
    return counted, per


def page_faults(binary, url):
    """Minor page faults of the run and every process it reaped (its guardian and command)."""
    quiet = [(os.POSIX_SPAWN_OPEN, fd, "/dev/null", os.O_RDWR, 0) for fd in (0, 1, 2)]
    argv = [binary, "--redis-url", url, "--key", "k", "--", "true"]
    pid = os.posix_spawn(binary, argv, run_env(), file_actions=quiet)
    _, status, usage = os.wait4(pid, 0)
    if os.waitstatus_to_exitcode(status) != 0:
        sys.exit(f"{binary} failed: {os.waitstatus_to_exitcode(status)}")
    return usage.ru_minflt


def instructions(binary, url, workdir):
    for f in os.listdir(workdir):
        if f.startswith("cg."):
            os.remove(os.path.join(workdir, f))
    cmd = ["valgrind", "--tool=callgrind", "--callgrind-out-file=" + os.path.join(workdir, "cg.%p"),
           binary, "--redis-url", url, "--key", "k", "--", "true"]
    done = subprocess.run(cmd, env=run_env(), timeout=120, stdout=subprocess.DEVNULL,
                          stderr=subprocess.PIPE, text=True)
    if done.returncode != 0:
        # The static build execs its guardian from a clone(CLONE_VM) child, which valgrind
        # does not support: its instructions are not counted.
        unsupported = [l for l in done.stderr.splitlines() if "Unsupported" in l]
        print("  instructions: valgrind cannot run this binary"
              + (f" ({unsupported[0].split('== ', 1)[-1]})" if unsupported else ""))
        return None
    total = 0
    for f in os.listdir(workdir):
        if f.startswith("cg."):
            for line in open(os.path.join(workdir, f)):
                m = re.match(r"(summary|totals): (\d+)", line)
                if m:
                    total += int(m.group(2))
                    break
    return total


def valgrind_runs(binary):
    if not shutil.which("valgrind"):
        return False
    probe = subprocess.run(["valgrind", "--tool=none", binary, "--version"],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return probe.returncode == 0


def read_budgets():
    budgets, margin = {}, None
    for line in open(BUDGETS):
        line = line.split("#", 1)[0].split()
        if len(line) != 2:
            continue
        if line[0] == "margin":
            margin = float(line[1].rstrip("%")) / 100
        else:
            budgets[line[0]] = int(line[1])
    return budgets, margin


def default_signals():
    # Likewise the dispositions: a signal ignored at start (nohup's SIGHUP, a CI runner's) gets
    # no handler, and one system call fewer.
    for sig in signal.valid_signals():
        try:
            if signal.getsignal(sig) == signal.SIG_IGN:
                signal.signal(sig, signal.SIG_DFL)
        except (OSError, ValueError):
            pass


def main():
    default_signals()
    args = [a for a in sys.argv[1:] if a != "--check"]
    check = "--check" in sys.argv[1:]
    binary = os.path.abspath(args[0] if args else os.path.join(ROOT, "target", "release", "redlock-run"))
    for tool in ["strace", "redis-server"]:
        if not shutil.which(tool):
            sys.exit(f"{tool} is not installed")
    with tempfile.TemporaryDirectory() as workdir:
        server, port = start_redis(workdir)
        try:
            url = f"redis://127.0.0.1:{port}"
            runs = sorted((syscalls(binary, url, workdir) for _ in range(RUNS)), key=lambda r: r[0])
            middle, per = runs[RUNS // 2]
            faults = sorted(page_faults(binary, url) for _ in range(RUNS))
            counts = {"syscalls": middle, "page_faults": faults[RUNS // 2]}
            if valgrind_runs(binary):
                counted = [instructions(binary, url, workdir) for _ in range(VALGRIND_RUNS)]
                if None not in counted:
                    counts["instructions"] = min(counted)
        finally:
            server.kill()
            server.wait()
    print(f"{binary}: one uncontended run of `--key k -- true`")
    print(f"  syscalls (waits left out), median of {RUNS}: {counts['syscalls']}"
          f"  (all of the {RUNS}: {[r[0] for r in runs]})")
    print("    " + ", ".join(f"{n} {c}" for n, c in sorted(per.items(), key=lambda p: -p[1])
                             if n not in WAITS))
    print(f"  page faults, median of {RUNS}: {counts['page_faults']}  (all of the {RUNS}: {faults})")
    if "instructions" in counts:
        print(f"  instructions (wrapper and guardian, callgrind), least of {VALGRIND_RUNS}: "
              f"{counts['instructions']}")
    else:
        print("  instructions: not counted (no valgrind, or it cannot run the binary)")
    if not check:
        return
    budgets, margin = read_budgets()
    failed = False
    for name, value in counts.items():
        budget = budgets[name]
        limit = int(budget * (1 + margin))
        verdict = "ok"
        if value > limit:
            verdict = f"OVER BUDGET (more than {limit}): find what the change added, or raise " \
                      "the budget in benches/budgets in a commit that says why"
            failed = True
        elif value < budget * (1 - margin):
            verdict = "well under budget: lower it in benches/budgets"
        print(f"  {name}: {value} against a budget of {budget} (+{margin:.0%}): {verdict}")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
