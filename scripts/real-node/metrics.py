#!/usr/bin/env python3
"""The driver's /metrics on a real node, kept as JSON beside the check reports, and the BENCHMARKS.md table made from
such files.

  metrics.py scrape URL|FILE --out FILE.json [--label KEY=VALUE ...]
      Read the driver's Prometheus text (from its --metrics-address, or a saved scrape), parse it, and write one
      JSON document: {"format": "wincsi-node-metrics-v1", "labels": {...}, "host": {...}, "families": {NAME:
      {"type", "help", "samples": [{"name", "labels", "value"}]}}}. `host` is where the scrape was taken (platform
      and Windows build); the labels say what ran (the workflow passes image, release, deployment, suite).
  metrics.py table FILE.json... [--markdown-out FILE]
      The real latency of each host operation and of each CSI RPC, per runner image and per csi-proxy release (and
      `native` for the native backend): calls, mean, and the histogram bucket bounds holding the median and the 95th
      percentile (upper bounds: a histogram keeps no exact values), summed over every file of the same image and
      release. Markdown, for BENCHMARKS.md ("Real Windows runners").
  metrics.py self-test FILE.json
      The document is well formed and holds the families the table reads, with a +Inf bucket equal to each count.

Needs only the standard library (it runs on the runner's own Python).
"""
import json
import math
import platform
import re
import sys
import urllib.request
from collections import defaultdict

FORMAT = "wincsi-node-metrics-v1"
HOST = "wincsi_host_call_duration_seconds"
RPC = "wincsi_csi_request_duration_seconds"
SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+(\S+)(?:\s+\d+)?$')
LABEL = re.compile(r'\s*([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"\s*,?')


def fail(msg):
    sys.exit(f"metrics.py: {msg}")


def unescape(v):
    return v.replace('\\"', '"').replace("\\n", "\n").replace("\\\\", "\\")


def parse_labels(text, line):
    labels, pos = {}, 0
    while pos < len(text):
        m = LABEL.match(text, pos)
        if not m:
            fail(f"cannot parse the labels of: {line}")
        labels[m.group(1)] = unescape(m.group(2))
        pos = m.end()
    return labels


def parse(text):
    """Prometheus text format 0.0.4 (what the driver serves) → families by name."""
    families, types, helps = {}, {}, {}
    for line in text.splitlines():
        line = line.strip()
        if not line:
            continue
        if line.startswith("#"):
            parts = line.split(None, 3)
            if len(parts) >= 3 and parts[1] in ("TYPE", "HELP"):
                (types if parts[1] == "TYPE" else helps)[parts[2]] = parts[3] if len(parts) > 3 else ""
            continue
        m = SAMPLE.match(line)
        if not m:
            fail(f"not a sample line: {line}")
        name, labels, value = m.group(1), parse_labels(m.group(2) or "", line), float(m.group(3))
        family = name
        for suffix in ("_bucket", "_sum", "_count", "_total", "_created", "_info"):
            base = name[: -len(suffix)] if name.endswith(suffix) else None
            if base and base in types:
                family = base
                break
        families.setdefault(family, {"type": types.get(family, "untyped"), "help": helps.get(family, ""),
                                     "samples": []})["samples"].append({"name": name, "labels": labels,
                                                                         "value": value})
    return families


def scrape(source, out, labels):
    if re.match(r"^https?://", source):
        with urllib.request.urlopen(source, timeout=30) as r:
            text = r.read().decode("utf-8")
    else:
        with open(source, encoding="utf-8") as f:
            text = f.read()
    doc = {
        "format": FORMAT,
        "labels": labels,
        "host": {"system": platform.system(), "release": platform.release(), "version": platform.version(),
                 "machine": platform.machine()},
        "families": parse(text),
    }
    with open(out, "w", encoding="utf-8") as f:
        json.dump(doc, f, indent=1, sort_keys=True)
    hosts = sum(s["value"] for s in doc["families"].get(HOST, {}).get("samples", []) if s["name"] == HOST + "_count")
    rpcs = sum(s["value"] for s in doc["families"].get(RPC, {}).get("samples", []) if s["name"] == RPC + "_count")
    print(f"{out}: {len(doc['families'])} families, {int(hosts)} host calls, {int(rpcs)} CSI RPCs")


def load(path):
    with open(path, encoding="utf-8") as f:
        doc = json.load(f)
    if doc.get("format") != FORMAT:
        fail(f"{path}: not a {FORMAT} document")
    return doc


class Histogram:
    def __init__(self):
        self.buckets = defaultdict(float)  # upper bound -> cumulative count
        self.sum = 0.0
        self.count = 0.0

    def quantile_bound(self, q):
        """The upper bound of the bucket that holds quantile q."""
        want = q * self.count
        for bound in sorted(self.buckets):
            if self.buckets[bound] >= want:
                return bound
        return math.inf


def histograms(doc, family, key):
    """Histograms of `family` by the label `key` (other labels, e.g. grpc_code, merged)."""
    out = defaultdict(Histogram)
    for s in doc["families"].get(family, {}).get("samples", []):
        k = s["labels"].get(key)
        if k is None:
            continue
        if key == "operation":
            k = (s["labels"].get("backend", "?"), k)
        h = out[k]
        if s["name"] == family + "_bucket":
            h.buckets[float(s["labels"]["le"])] += s["value"]
        elif s["name"] == family + "_sum":
            h.sum += s["value"]
        elif s["name"] == family + "_count":
            h.count += s["value"]
    return out


def merge(into, other):
    for bound, n in other.buckets.items():
        into.buckets[bound] += n
    into.sum += other.sum
    into.count += other.count


def ms(seconds):
    if math.isinf(seconds):
        return "> last bucket"
    v = seconds * 1000
    return f"{v:.0f} ms" if v >= 10 else f"{v:.1f} ms" if v >= 1 else f"{v:.2f} ms"


def column(doc, backend):
    release = doc["labels"].get("release") or "?"
    return "native" if backend == "native" else release


ORDER = ["v1.1.3", "v1.2.1", "v1.3.0", "master", "native"]


def table(paths):
    # (image, windows build) -> column -> kind -> op -> Histogram
    data = defaultdict(lambda: defaultdict(lambda: {"host": defaultdict(Histogram), "rpc": defaultdict(Histogram)}))
    for path in paths:
        doc = load(path)
        image = doc["labels"].get("image") or "?"
        host = doc["host"]
        # Windows: `platform.version()` is the build (10.0.20348); elsewhere the kernel release says more.
        os_name = host.get("system", "?")
        build = host.get("version") if os_name == "Windows" else host.get("release")
        where = (image, f"{os_name} {build or '?'}")
        backends = {b for (b, _) in histograms(doc, HOST, "operation")}
        backend = "native" if backends == {"native"} else "csi-proxy"
        col = column(doc, backend)
        if doc["labels"].get("deployment") == "container":
            col += " (container)"
        for (_, op), h in histograms(doc, HOST, "operation").items():
            merge(data[where][col]["host"][op], h)
        for method, h in histograms(doc, RPC, "method").items():
            merge(data[where][col]["rpc"][method], h)
    lines = []
    for (image, build) in sorted(data):
        cols = sorted(data[(image, build)], key=lambda c: (ORDER.index(c.split()[0]) if c.split()[0] in ORDER
                                                           else len(ORDER), c))
        for kind, title in (("host", "host operation"), ("rpc", "CSI RPC")):
            ops = sorted({op for c in cols for op in data[(image, build)][c][kind]})
            if not ops:
                continue
            lines.append(f"**{image}** ({build}), per {title}: calls: mean, median ≤, p95 ≤ (bucket bounds)")
            lines.append("")
            lines.append("| " + title[0].upper() + title[1:] + " | " + " | ".join(cols) + " |")
            lines.append("| --- |" + " --- |" * len(cols))
            for op in ops:
                cells = []
                for c in cols:
                    h = data[(image, build)][c][kind].get(op)
                    if not h or not h.count:
                        cells.append("—")
                        continue
                    cells.append(f"{int(h.count)}: {ms(h.sum / h.count)}, ≤ {ms(h.quantile_bound(0.5))}, "
                                 f"≤ {ms(h.quantile_bound(0.95))}")
                lines.append(f"| {op} | " + " | ".join(cells) + " |")
            lines.append("")
    if not lines:
        fail("no host-call or CSI RPC histogram in the files given")
    return "\n".join(lines)


def self_test(path):
    doc = load(path)
    for family in (HOST, RPC):
        hs = histograms(doc, family, "operation" if family == HOST else "method")
        if not hs:
            fail(f"{path}: no {family} samples")
        for key, h in hs.items():
            inf = h.buckets.get(math.inf)
            if inf is None or inf != h.count:
                fail(f"{path}: {family} {key}: +Inf bucket {inf} != count {h.count}")
    print(f"{path}: {len(doc['families'])} families; host-call and CSI RPC histograms consistent")


def main(argv):
    if len(argv) >= 3 and argv[1] == "scrape":
        rest, labels, out = argv[3:], {}, None
        while rest:
            if rest[0] == "--out" and len(rest) > 1:
                out, rest = rest[1], rest[2:]
            elif rest[0] == "--label" and len(rest) > 1 and "=" in rest[1]:
                k, v = rest[1].split("=", 1)
                labels[k], rest = v, rest[2:]
            else:
                sys.exit(__doc__)
        if not out:
            sys.exit(__doc__)
        scrape(argv[2], out, labels)
    elif len(argv) >= 3 and argv[1] == "table":
        paths, out = argv[2:], None
        if "--markdown-out" in paths:
            i = paths.index("--markdown-out")
            out, paths = paths[i + 1], paths[:i] + paths[i + 2:]
        text = table(paths)
        if out:
            with open(out, "w", encoding="utf-8") as f:
                f.write(text + "\n")
        print(text)
    elif len(argv) == 3 and argv[1] == "self-test":
        self_test(argv[2])
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main(sys.argv)
