#!/usr/bin/env python3
"""Whole-process wall and CPU time of commands run in turn, A B C C B A … (BENCHMARKS.md).

    python3 benches/interleaved.py [--runs 300] [--warmup 10] [--server redis-server] \\
        [--reference 'flock {dir}/f true'] \\
        'target/release/redlock-run --redis-url {url} --key k -- true' 'OTHER BUILD …' …

Starts its own server (redis-server, or a valkey-server given with --server) on a free
loopback port, without persistence; `{url}` in a command is its URL, `{dir}` a temporary
directory. Each run is spawned with stdio on /dev/null and reaped with wait4(2): wall time from
the spawn to the reaping, CPU time the user and system time of the process and of every
descendant it reaped. A round is one run of each command, in the order given and the next
round in the reverse order, so that drift in a shared machine's load hits every command alike
and none always comes right after another (a run right after a redlock-run run finds Redis
warm). With --reference, every run comes right after a run of the reference of its own, and
"× ref" is the median of the ratios of each run to that reference run; "× first" and "− first"
are the medians of each round's ratios and differences to the first command's run (with
--group N, the first of its group: the commands are groups of N, builds of one kind, say).
Prints Markdown.
"""

import argparse
import os
import shlex
import shutil
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from redis_cost import Server  # noqa: E402


def once(argv):
    """(wall, cpu) of one run of `argv`, in seconds."""
    quiet = [(os.POSIX_SPAWN_OPEN, fd, "/dev/null", os.O_RDWR, 0) for fd in (0, 1, 2)]
    start = time.perf_counter()
    pid = os.posix_spawnp(argv[0], argv, os.environ, file_actions=quiet)
    _, status, usage = os.wait4(pid, 0)
    wall = time.perf_counter() - start
    if os.waitstatus_to_exitcode(status) != 0:
        sys.exit(f"{shlex.join(argv)} failed: {os.waitstatus_to_exitcode(status)}")
    return wall, usage.ru_utime + usage.ru_stime


def median(values):
    values = sorted(values)
    half = len(values) // 2
    return values[half] if len(values) % 2 else (values[half - 1] + values[half]) / 2


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=300, help="rounds counted")
    parser.add_argument("--warmup", type=int, default=10, help="rounds first, not counted")
    parser.add_argument("--server", default="redis-server")
    parser.add_argument("--reference", help="a command run right before every run of the others")
    parser.add_argument("--group", type=int, default=0, help="compare each command with the first of its group of N")
    parser.add_argument("commands", nargs="+", help="each one string, split as a shell splits words")
    args = parser.parse_args()
    server = Server(args.server)
    scratch = tempfile.mkdtemp(prefix="interleaved-")
    try:
        url = f"redis://127.0.0.1:{server.port}"

        def split(command):
            return shlex.split(command.replace("{url}", url).replace("{dir}", scratch))

        argvs = [split(c) for c in args.commands]
        reference = split(args.reference) if args.reference else None
        samples = [[] for _ in argvs]
        # for each command, the reference run right before each of its runs
        refs = [[] for _ in argvs]
        for round_ in range(args.warmup + args.runs):
            order = range(len(argvs)) if round_ % 2 == 0 else reversed(range(len(argvs)))
            for i in order:
                ref = once(reference) if reference else None
                took = once(argvs[i])
                if round_ >= args.warmup:
                    samples[i].append(took)
                    refs[i].append(ref)
        print(f"- date: {time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())}")
        print(f"- machine: {os.cpu_count()} CPUs, Linux {os.uname().release}; {server.version}")
        print(f"- {args.runs} rounds after {args.warmup} not counted")
        if reference:
            print(f"- reference: `{args.reference}`, right before every run")
        print(
            "\n| command | wall | × first | − first | × ref | CPU | × first | − first | × ref |\n"
            "|---|---|---|---|---|---|---|---|---|"
        )

        def ratio(sample, base, part):
            pairs = [(s[part], b[part]) for s, b in zip(sample, base) if b is not None and b[part] > 0]
            return f"{median(s / b for s, b in pairs):.3f}" if pairs else "—"

        def less(sample, base, part):
            return f"{median((s[part] - b[part]) * 1e3 for s, b in zip(sample, base)):+.3f} ms"

        if reference:
            all_refs = [r for rs in refs for r in rs]
            wall, cpu = median(w for w, _ in all_refs), median(c for _, c in all_refs)
            print(f"| `{args.reference}` (reference) | {wall * 1e3:.3f} ms | | | | {cpu * 1e3:.3f} ms | | | |")
        for i, (command, sample, ref) in enumerate(zip(args.commands, samples, refs)):
            first = samples[i - i % args.group if args.group else 0]
            wall = median(w for w, _ in sample)
            cpu = median(c for _, c in sample)
            print(
                f"| `{command}` | {wall * 1e3:.3f} ms | {ratio(sample, first, 0)} | {less(sample, first, 0)} "
                f"| {ratio(sample, ref, 0)} | {cpu * 1e3:.3f} ms | {ratio(sample, first, 1)} "
                f"| {less(sample, first, 1)} | {ratio(sample, ref, 1)} |"
            )
    finally:
        server.stop()
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()
