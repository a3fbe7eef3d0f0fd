#!/usr/bin/env python3
"""Runs test jobs in parallel lanes (scripts/test-all.sh's suites step).

Most of the suites' wall time is waiting, not CPU: the simulated host's arrivals, the e2e nodes' settle times, the
real-node kit's processes. Run one after another (as `cargo test` runs its binaries) a 2-core machine sits idle
for most of it; a few lanes overlap the waits.

    run-suites.py --jobs N --log FILE JOBFILE
    run-suites.py --self-test     # a failing job fails the run, the others still run, a hung job is killed

JOBFILE holds one JSON object per line: {"name", "cmd" (argv), "cwd", "env" (added to the environment), "weight"
(expected seconds: the heaviest start first)}. Each job's output goes to its own buffer and is appended whole to
FILE (and printed, for a failed job) when it ends, so lanes never interleave lines. Every job runs even when one
fails; the exit code is 1 when any failed. A job that outlives --timeout seconds is killed (with its process
group) and counted as failed: a hung test must not hang CI. The run ends with each job's time, longest first.
"""

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time


def run_job(job, timeout, lock, log, results):
    env = dict(os.environ)
    env.update(job.get("env", {}))
    start = time.monotonic()
    with tempfile.TemporaryFile(mode="w+b") as out:
        proc = subprocess.Popen(
            job["cmd"],
            cwd=job.get("cwd") or None,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        timed_out = False
        try:
            rc = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            timed_out = True
            os.killpg(proc.pid, signal.SIGKILL)
            rc = proc.wait()
        elapsed = time.monotonic() - start
        out.seek(0)
        text = out.read().decode("utf-8", errors="replace")
    ok = rc == 0 and not timed_out
    with lock:
        header = f"===== {job['name']}: {'ok' if ok else 'FAILED'} ({elapsed:.0f}s)"
        log.write(f"{header}\n{text}\n")
        log.flush()
        if ok:
            print(header, flush=True)
        else:
            why = f"killed after {timeout}s (--timeout)" if timed_out else f"exit code {rc}"
            print(f"{header}: {why}\n{text}", flush=True)
        results.append((job["name"], elapsed, ok))


def self_test():
    """Runs this script on three jobs (one passes, one fails, one hangs past a 2 s limit) and checks what it says."""
    with tempfile.TemporaryDirectory() as tmp:
        jobfile = os.path.join(tmp, "jobs.jsonl")
        log = os.path.join(tmp, "log")
        with open(jobfile, "w", encoding="utf-8") as f:
            for name, cmd in [("passes", "echo fine"), ("fails", "echo broken; exit 3"), ("hangs", "sleep 60")]:
                f.write(json.dumps({"name": name, "cmd": ["sh", "-c", cmd]}) + "\n")
        run = subprocess.run([sys.executable, __file__, "--jobs", "2", "--timeout", "2", "--log", log, jobfile],
                             capture_output=True, text=True, check=False)
        with open(log, encoding="utf-8") as f:
            logged = f.read()
        said = run.stdout + run.stderr
        checks = [
            (run.returncode == 1, f"exit code {run.returncode}, expected 1"),
            ("===== fails: FAILED" in said and "exit code 3" in said and "broken" in said, "the failed job in full"),
            ("===== hangs: FAILED" in said and "killed after 2s" in said, "the hung job killed"),
            ("===== passes: ok" in said and "fine" in logged, "the passing job run and logged"),
        ]
        bad = [what for ok, what in checks if not ok]
        if bad:
            sys.exit("run-suites.py --self-test: " + "; ".join(bad) + "\n" + said)
    print("run-suites.py --self-test: a failing and a hung job fail the run, the others still run")


def main():
    if sys.argv[1:] == ["--self-test"]:
        self_test()
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=4)
    parser.add_argument("--timeout", type=int, default=1800)
    parser.add_argument("--log", required=True)
    parser.add_argument("jobfile")
    args = parser.parse_args()

    with open(args.jobfile, encoding="utf-8") as f:
        jobs = [json.loads(line) for line in f if line.strip()]
    if not jobs:
        sys.exit("run-suites.py: no jobs")
    # Heaviest first: the run ends when its longest lane does.
    pending = sorted(jobs, key=lambda j: -j.get("weight", 0))
    lock = threading.Lock()
    results = []
    start = time.monotonic()
    with open(args.log, "a", encoding="utf-8") as log:
        queue = list(pending)

        def lane():
            while True:
                with lock:
                    if not queue:
                        return
                    job = queue.pop(0)
                run_job(job, args.timeout, lock, log, results)

        lanes = [threading.Thread(target=lane) for _ in range(max(1, args.jobs))]
        for t in lanes:
            t.start()
        for t in lanes:
            t.join()

    wall = time.monotonic() - start
    total = sum(r[1] for r in results)
    print(f"\n{len(results)} jobs on {args.jobs} lanes: {wall:.0f}s wall, {total:.0f}s summed")
    for name, elapsed, ok in sorted(results, key=lambda r: -r[1]):
        print(f"  {elapsed:6.0f}s  {'ok    ' if ok else 'FAILED'}  {name}")
    failed = [r[0] for r in results if not r[2]]
    if failed:
        print("failed jobs:\n  " + "\n  ".join(failed), file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
