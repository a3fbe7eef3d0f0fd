#!/usr/bin/env python3
"""Assert what a check-node JSON report must show.

  report.py self-test REPORT RELEASE   the simulated host playing RELEASE: every check ran, no finding contradicts or
                                       is inconclusive, the release identified is exactly RELEASE (full and
                                       before-reboot phases) and cleanup is complete
  report.py node REPORT [--expect PATH=VALUE]... [--summary FILE]
                                       a real node: cleanup complete, no check failed (contradictions are results,
                                       not failures) and each --expect holds (PATH is dotted: tool.target=
                                       x86_64-pc-windows-gnu says the binary that ran is the one that ships,
                                       node.backend=native); prints the findings table, and writes one line for the
                                       workflow's gate to FILE
  report.py table REPORT...            Markdown rows for docs/real-node-checks.md ("Results") from real runs

The schema itself is checked separately (check-jsonschema --schemafile driver/src/check/report-v1.schema.json).
"""
import json
import sys
import time


def load(path):
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def findings(report):
    for check in report["checks"]:
        for finding in check["findings"]:
            yield check, finding


def ref(r):
    return f"row {r['id']}" if r["kind"] == "row" else f"{r['kind']} #{r['id']}"


def fail(msg):
    sys.exit(f"report.py: {msg}")


def self_test(path, release):
    r = load(path)
    bad = [c["id"] + ": " + (c["note"] or "") for c in r["checks"] if c["status"] != "ran"]
    if bad:
        fail(f"{path}: checks did not run: {bad}")
    wrong = [f"{c['id']}/{f['observation']}: {ref(f['ref'])} {f['verdict']}"
             for c, f in findings(r) if f["verdict"] in ("contradicts", "inconclusive")]
    if wrong:
        fail(f"{path}: {release}: {wrong}")
    if r["phase"] in ("full", "before-reboot") and r["release"]["identified"] != [release]:
        fail(f"{path}: identified {r['release']['identified']}, expected [{release}]")
    if not r["cleanup"]["complete"]:
        fail(f"{path}: cleanup incomplete: {r['cleanup']['left']}")
    n = r["summary"]["findings"]["confirms"]
    print(f"{path}: {release} {r['phase']}: {len(r['checks'])} checks ran, {n} findings confirm, none contradicts")


def node(path, expects=(), summary=None):
    r = load(path)
    failed = [c["id"] + ": " + (c["note"] or "") for c in r["checks"] if c["status"] == "failed"]
    for c, f in findings(r):
        if f["verdict"] != "not_applicable":
            print(f"  {f['verdict']:13} {ref(f['ref']):32} {c['id']}/{f['observation']}")
    print(f"{path}: release claimed {r['release']['claimed']}, identified {r['release']['identified']}; "
          f"summary {r['summary']}")
    checks, verdicts = r["summary"]["checks"], r["summary"]["findings"]
    line = (f"{r['node']['backend']} ({r['tool']['target']}): {checks['ran']} checks ran, {checks['failed']} failed, "
            f"{checks['skipped']} skipped; {verdicts['confirms']} confirm, {verdicts['contradicts']} contradict, "
            f"{verdicts['inconclusive']} inconclusive, {verdicts['recorded']} recorded; release identified "
            f"{'/'.join(r['release']['identified']) or 'none'}; cleanup "
            f"{'complete' if r['cleanup']['complete'] else 'INCOMPLETE'}")
    if summary:
        with open(summary, "w", encoding="utf-8") as f:
            f.write(line + "\n")
    for dotted, want in expects:
        have = r
        for key in dotted.split("."):
            have = have.get(key) if isinstance(have, dict) else None
        if have != want:
            fail(f"{path}: {dotted} is {have!r}, expected {want!r}")
    if failed:
        fail(f"{path}: checks failed: {failed}")
    if not r["cleanup"]["complete"]:
        fail(f"{path}: cleanup incomplete: {r['cleanup']['left']}")


def table(paths):
    for path in paths:
        r = load(path)
        release = r["release"]["claimed"] or "/".join(r["release"]["identified"]) or "?"
        for c, f in findings(r):
            if f["ref"]["kind"] != "node-check" or f["verdict"] == "not_applicable":
                continue
            obs = c["observations"][f["observation"]]
            seen = f"error {obs['error']['kind']}: {obs['error']['message']}" if obs["error"] else f"ok {json.dumps(obs['value'])}"
            seen = seen.replace("|", "\\|").replace("\r", " ").replace("\n", " ")[:400]
            day = time.strftime("%Y-%m-%d", time.gmtime(r["started_unix_ms"] / 1000))
            # The Windows build is not in the report: fill it in (`[Environment]::OSVersion.Version`).
            print(f"| {f['ref']['id']} | {release} | WINDOWS BUILD | {day} | {f['verdict']}: {seen} |")


def main(argv):
    if len(argv) >= 4 and argv[1] == "self-test":
        self_test(argv[2], argv[3])
    elif len(argv) >= 3 and argv[1] == "node":
        rest, expects, summary = argv[3:], [], None
        while rest:
            if rest[0] == "--expect" and len(rest) > 1 and "=" in rest[1]:
                expects.append(tuple(rest[1].split("=", 1)))
            elif rest[0] == "--summary" and len(rest) > 1:
                summary = rest[1]
            else:
                sys.exit(__doc__)
            rest = rest[2:]
        node(argv[2], expects, summary)
    elif len(argv) >= 3 and argv[1] == "table":
        table(argv[2:])
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main(sys.argv)
