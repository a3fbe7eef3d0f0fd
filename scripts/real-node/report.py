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


def smb_options(report):
    """The smb_options check's digest, or None (no --smb-share, or an after-reboot phase)."""
    for c in report["checks"]:
        if c["id"] == "smb_options" and c.get("smb_options") is not None:
            return c, c["smb_options"]
    return None


def smb_options_line(report):
    """One line of what the smb_options check saw (issue 40 item 2; native items N47, N48)."""
    found = smb_options(report)
    if not found:
        return None
    c, so = found
    if c["observations"].get("refused_on_csi_proxy"):
        return "smb_options: refused on csiProxy mode (FailedPrecondition), no host call"
    mapped = c["observations"].get("map_with_options", {})
    made = "mapped" if mapped and not mapped.get("error") else "not mapped"
    shown = ", ".join(f"{k}={json.dumps(v)}" for k, v in so["reported"].items()) or "nothing read back"
    return (f"smb_options: build {so['windows_build']}, asked ({so['source']}) {json.dumps(so['asked'])}: {made}; "
            f"the mapping reports {shown}; an option the build lacks "
            f"{'refused' if so['missing'] else 'not asked (none lacking)'}; a stronger second stage "
            f"{'refused' if so['stronger'] else 'reused the mapping' if made == 'mapped' else 'not made'}")


def self_test(path, release):
    r = load(path)
    bad = [c["id"] + ": " + (c["note"] or "") for c in r["checks"] if c["status"] != "ran"]
    if bad:
        fail(f"{path}: checks did not run: {bad}")
    found = smb_options(r)
    if any(c["id"] == "smb_link_form" for c in r["checks"]) and not found:
        fail(f"{path}: the SMB checks ran but smb_options did not")
    if r["phase"] in ("full", "before-reboot") and found and r["node"]["backend"] == "csi-proxy":
        refused = (found[0]["observations"].get("refused_on_csi_proxy") or {}).get("error") or {}
        if refused.get("classification") != "FailedPrecondition" or "mode: hostProcess" not in refused.get("message", ""):
            fail(f"{path}: smb_options on csiProxy mode must record the driver's refusal naming mode: hostProcess, "
                 f"not {refused}")
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
    options = smb_options_line(r)
    if options:
        print(f"  {options}")
    checks, verdicts = r["summary"]["checks"], r["summary"]["findings"]
    line = (f"{r['node']['backend']} ({r['tool']['target']}): {checks['ran']} checks ran, {checks['failed']} failed, "
            f"{checks['skipped']} skipped; {verdicts['confirms']} confirm, {verdicts['contradicts']} contradict, "
            f"{verdicts['inconclusive']} inconclusive, {verdicts['recorded']} recorded; release identified "
            f"{'/'.join(r['release']['identified']) or 'none'}; cleanup "
            f"{'complete' if r['cleanup']['complete'] else 'INCOMPLETE'}")
    if options:
        line += "; " + options
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
        # Reports since node.windows_build carry the native backend's build; else fill it in
        # (`[Environment]::OSVersion.Version`).
        build = r["node"].get("windows_build") or "WINDOWS BUILD"
        for c, f in findings(r):
            if f["ref"]["kind"] not in ("node-check", "native") or f["verdict"] == "not_applicable":
                continue
            item = f["ref"]["id"] if f["ref"]["kind"] == "node-check" else f"N{f['ref']['id']}"
            obs = c["observations"][f["observation"]]
            if obs["error"]:
                kind = obs["error"].get("classification") or obs["error"]["kind"]
                seen = f"error {kind}: {obs['error']['message']}"
            else:
                seen = f"ok {json.dumps(obs['value'])}"
            if c.get("smb_options") is not None and f["observation"] == "stronger_than_mapping":
                seen += f" (the mapping reports {json.dumps(c['smb_options']['reported'])})"
            seen = seen.replace("|", "\\|").replace("\r", " ").replace("\n", " ")[:400]
            day = time.strftime("%Y-%m-%d", time.gmtime(r["started_unix_ms"] / 1000))
            print(f"| {item} | {release} | {build} | {day} | {f['verdict']}: {seen} |")


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
