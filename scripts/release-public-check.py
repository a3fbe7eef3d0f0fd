#!/usr/bin/env python3
"""Checks that a release can be pulled by anyone: the image manifests and the chart, fetched with no credentials.

New GHCR packages are private, and only the package's settings page on github.com makes one public, so the first
release of each package fails here until the maintainer does that once. The release workflow
(.github/workflows/release.yml) runs this after pushing; e2e/tests/chart_release.rs runs it against a fake registry
(public, private, missing, a tampered chart).

    release-public-check.py --image ghcr.io/wincsi/wincsi-node --chart oci://ghcr.io/wincsi/charts/wincsi \
        --version 0.1.0 [--summary FILE] [--connect ghcr.io=127.0.0.1:5000 --plain-http]

What "pull" means here, per reference, as `docker pull` and `helm pull` do it with no login (the OCI distribution
spec's anonymous flow): GET /v2/<repo>/manifests/<ref>; on 401 with `WWW-Authenticate: Bearer realm=…,service=…,
scope=…`, an anonymous token from the realm, and the GET again with it. The image's manifest list ($IMAGE:$VERSION,
with its windows/amd64 entries) and the HostProcess image ($IMAGE:$VERSION-hostprocess); the chart's manifest (Helm's
config media type) and its chart layer, whose sha256 must be the layer's digest and whose Chart.yaml must name the
chart and the version. Any other answer fails, naming the status, the registry's error codes and, for ghcr.io, the
exact settings page where the package is made public. Exit 0 when everything was pulled, 1 otherwise, 2 on bad usage.
--summary appends a Markdown report (the workflow passes $GITHUB_STEP_SUMMARY).
"""

import argparse
import hashlib
import io
import json
import os
import sys
import tarfile
import urllib.error
import urllib.parse
import urllib.request

ACCEPT_MANIFESTS = ", ".join([
    "application/vnd.oci.image.index.v1+json",
    "application/vnd.oci.image.manifest.v1+json",
    "application/vnd.docker.distribution.manifest.list.v2+json",
    "application/vnd.docker.distribution.manifest.v2+json",
])
INDEX_TYPES = ("application/vnd.oci.image.index.v1+json", "application/vnd.docker.distribution.manifest.list.v2+json")
HELM_CONFIG = "application/vnd.cncf.helm.config.v1+json"
HELM_CHART = "application/vnd.cncf.helm.chart.content.v1.tar+gzip"
TIMEOUT = 60


class Failed(Exception):
    """A reference that cannot be pulled anonymously, and why."""


class NoRedirectAuth(urllib.request.HTTPRedirectHandler):
    """Follows a blob's redirect (GHCR sends blobs to a signed storage URL) without carrying the token elsewhere."""

    def redirect_request(self, req, fp, code, msg, headers, newurl):
        new = super().redirect_request(req, fp, code, msg, headers, newurl)
        if new is not None and urllib.parse.urlsplit(newurl).netloc != urllib.parse.urlsplit(req.full_url).netloc:
            new.remove_header("Authorization")
        return new


OPENER = urllib.request.build_opener(NoRedirectAuth())


def http_get(url, headers):
    """(status, headers, body) of a GET; an HTTP error status is an answer, not an exception."""
    req = urllib.request.Request(url, headers=headers, method="GET")
    try:
        with OPENER.open(req, timeout=TIMEOUT) as r:
            return r.status, r.headers, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.headers, e.read()
    except (urllib.error.URLError, OSError) as e:
        raise Failed(f"{url}: cannot connect ({e})") from e


def error_codes(body):
    """The registry's error codes (`{"errors": [{"code": …}]}`), if the body has them."""
    try:
        return ", ".join(e.get("code", "?") for e in json.loads(body).get("errors", []))
    except (ValueError, AttributeError):
        return ""


def bearer_challenge(value):
    """The parameters of `WWW-Authenticate: Bearer k="v",…`, or None for another scheme."""
    if not value or not value.lower().startswith("bearer "):
        return None
    params = {}
    for part in value[7:].split(","):
        key, _, v = part.strip().partition("=")
        params[key.strip().lower()] = v.strip().strip('"')
    return params


class Registry:
    def __init__(self, host, connect, plain_http):
        self.host = host
        self.base = f"{'http' if plain_http else 'https'}://{connect.get(host, host)}"
        self.tokens = {}

    def get(self, repo, path, accept):
        """GET /v2/<repo>/<path> anonymously: the token dance once per repository."""
        url = f"{self.base}/v2/{repo}/{path}"
        headers = {"Accept": accept}
        if repo in self.tokens:
            headers["Authorization"] = f"Bearer {self.tokens[repo]}"
        status, h, body = http_get(url, headers)
        if status == 401 and repo not in self.tokens:
            challenge = bearer_challenge(h.get("WWW-Authenticate"))
            if challenge is None or "realm" not in challenge:
                return status, h, body
            query = {"scope": challenge.get("scope") or f"repository:{repo}:pull"}
            if challenge.get("service"):
                query["service"] = challenge["service"]
            tstatus, _, tbody = http_get(f"{challenge['realm']}?{urllib.parse.urlencode(query)}", {})
            if tstatus != 200:
                return tstatus, h, tbody
            try:
                answer = json.loads(tbody)
                self.tokens[repo] = answer.get("token") or answer["access_token"]
            except (ValueError, KeyError, AttributeError):
                raise Failed(f"the token endpoint {challenge['realm']} answered no token") from None
            headers["Authorization"] = f"Bearer {self.tokens[repo]}"
            status, h, body = http_get(url, headers)
        return status, h, body


def settings_page(host, repo):
    """Where a GHCR package is made public: its settings page ("Danger Zone" → "Change visibility")."""
    if host != "ghcr.io":
        return None
    owner, _, package = repo.partition("/")
    quoted = urllib.parse.quote(package, safe="")
    return (f"https://github.com/orgs/{owner}/packages/container/{quoted}/settings",
            f"https://github.com/users/{owner}/packages/container/{quoted}/settings")


def split_ref(ref):
    """`host/owner/name` → (host, `owner/name`)."""
    ref = ref.removeprefix("oci://")
    host, _, repo = ref.partition("/")
    if not repo or "." not in host and ":" not in host and host != "localhost":
        raise SystemExit(f"release-public-check: {ref!r} is not registry/repository")
    return host, repo


def manifest(reg, repo, tag):
    status, _, body = reg.get(repo, f"manifests/{tag}", ACCEPT_MANIFESTS)
    if status != 200:
        codes = error_codes(body)
        raise Failed(f"answered {status}{f' ({codes})' if codes else ''}")
    try:
        return json.loads(body)
    except ValueError:
        raise Failed("answered 200 with no JSON manifest") from None


def check_index(reg, repo, tag):
    m = manifest(reg, repo, tag)
    if m.get("mediaType") not in INDEX_TYPES:
        raise Failed(f"is a {m.get('mediaType')}, not the multi-Windows-version manifest list")
    windows = [e for e in m.get("manifests", []) if (e.get("platform") or {}).get("os") == "windows"]
    if not windows:
        raise Failed("lists no windows image")
    versions = ", ".join(sorted((e.get("platform") or {}).get("os.version", "?") for e in windows))
    return f"manifest list, {len(windows)} Windows images ({versions})"


def check_image(reg, repo, tag):
    m = manifest(reg, repo, tag)
    return f"{m.get('mediaType', 'manifest')}"


def check_chart(reg, repo, tag, name, version):
    m = manifest(reg, repo, tag)
    if (m.get("config") or {}).get("mediaType") != HELM_CONFIG:
        raise Failed(f"is not a Helm chart (config {(m.get('config') or {}).get('mediaType')})")
    layers = [l for l in m.get("layers", []) if l.get("mediaType") == HELM_CHART]
    if len(layers) != 1:
        raise Failed(f"has {len(layers)} chart layers")
    digest = layers[0].get("digest", "")
    status, _, blob = reg.get(repo, f"blobs/{digest}", "*/*")
    if status != 200:
        codes = error_codes(blob)
        raise Failed(f"chart layer {digest} answered {status}{f' ({codes})' if codes else ''}")
    if f"sha256:{hashlib.sha256(blob).hexdigest()}" != digest:
        raise Failed(f"chart layer is not {digest}")
    try:
        with tarfile.open(fileobj=io.BytesIO(blob), mode="r:gz") as tar:
            chart_yaml = tar.extractfile(f"{name}/Chart.yaml").read().decode()
    except (tarfile.TarError, KeyError, AttributeError, OSError) as e:
        raise Failed(f"chart layer has no {name}/Chart.yaml ({e})") from None
    fields = dict(line.split(":", 1) for line in chart_yaml.splitlines() if ":" in line and not line.startswith(" "))
    got = {k.strip(): v.strip().strip('"') for k, v in fields.items()}
    if got.get("name") != name or got.get("version") != version:
        raise Failed(f"chart layer is {got.get('name')} {got.get('version')}, not {name} {version}")
    return f"Helm chart {name} {version}, {len(blob)} bytes, digest verified"


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--image", required=True, help="image repository, e.g. ghcr.io/wincsi/wincsi-node")
    p.add_argument("--chart", required=True, help="chart reference, e.g. oci://ghcr.io/wincsi/charts/wincsi")
    p.add_argument("--version", required=True)
    p.add_argument("--hostprocess-suffix", default="-hostprocess")
    p.add_argument("--summary", help="append a Markdown report here ($GITHUB_STEP_SUMMARY)")
    p.add_argument("--connect", action="append", default=[], metavar="HOST=ADDR",
                   help="connect to ADDR for HOST (tests: a fake registry)")
    p.add_argument("--plain-http", action="store_true", help="http instead of https (tests only)")
    a = p.parse_args()
    connect = dict(c.split("=", 1) for c in a.connect)
    image_host, image_repo = split_ref(a.image)
    chart_host, chart_repo = split_ref(a.chart)
    chart_name = chart_repo.rsplit("/", 1)[-1]
    registries = {}

    def registry(host):
        return registries.setdefault(host, Registry(host, connect, a.plain_http))

    checks = [
        ("image", image_host, image_repo, a.version,
         lambda: check_index(registry(image_host), image_repo, a.version)),
        ("image", image_host, image_repo, a.version + a.hostprocess_suffix,
         lambda: check_image(registry(image_host), image_repo, a.version + a.hostprocess_suffix)),
        ("chart", chart_host, chart_repo, a.version,
         lambda: check_chart(registry(chart_host), chart_repo, a.version, chart_name, a.version)),
    ]
    rows, failures = [], []
    for kind, host, repo, tag, check in checks:
        ref = f"{host}/{repo}:{tag}"
        try:
            what = check()
            rows.append(f"| `{ref}` | pulled anonymously: {what} |")
            print(f"release-public-check: ok: {ref}: {what}")
        except Failed as e:
            pages = settings_page(host, repo)
            advice = (f"make the {kind} package public once at {pages[0]} (a personal account's: {pages[1]}): "
                      "'Danger Zone' → 'Change visibility' → Public; then re-run the failed jobs"
                      if pages else f"make {host}/{repo} readable without credentials in the registry's settings")
            msg = f"{ref} cannot be pulled without credentials: {e}. {advice}"
            rows.append(f"| `{ref}` | **NOT PULLABLE**: {e}. {advice} |")
            failures.append(msg)
            print(f"release-public-check: FAILED: {msg}", file=sys.stderr)
            if os.environ.get("GITHUB_ACTIONS") == "true":
                print(f"::error title=Release not public::{msg}")
    if a.summary:
        with open(a.summary, "a", encoding="utf-8") as f:
            f.write("### Anonymous pull check\n\n| Reference | Result |\n| --- | --- |\n")
            f.write("\n".join(rows) + "\n\n")
            if failures:
                f.write("New GHCR packages are private, and only their settings page makes them public. Make each "
                        "package above public once, then re-run the failed jobs of this run: nothing is pushed "
                        "again.\n")
    if failures:
        print(f"release-public-check: {len(failures)} of {len(checks)} references cannot be pulled anonymously",
              file=sys.stderr)
        return 1
    print(f"release-public-check: all {len(checks)} references pulled anonymously")
    return 0


if __name__ == "__main__":
    sys.exit(main())
