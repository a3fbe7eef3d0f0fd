#!/usr/bin/env bash
# Chart checks for charts/wincsi and examples/ (offline; no cluster needed):
#   - helm lint --strict with Helm 3 and Helm 4;
#   - helm template with every scenario in charts/wincsi/ci/*-values.yaml, with both Helms;
#   - strict Kubernetes schema validation (unknown fields rejected) of every rendered object
#     and every file in examples/, against Kubernetes 1.30 and the newest bundled (1.37);
#   - yamllint of values files and examples;
#   - negative checks: the values schema rejects typos and wrong types, and the validator
#     really is strict;
#   - the release and test workflows (.github/workflows/{release,test}.yml) against the
#     GitHub-workflow schema (check-jsonschema, offline), scripts/release-check.sh against this
#     tree (and a wrong tag), scripts/release-images.sh's commands (--dry-run); the anonymous
#     pull check (scripts/release-public-check.py) runs against a fake registry in
#     e2e/tests/chart_release.rs;
#   - the PodMonitor renders only where the Prometheus Operator's API is served.
# Tools: $WINCSI_HELM3 / $WINCSI_HELM4 (else helm3 / helm4 on PATH), kubernetes-validate,
# yamllint, check-jsonschema, jq — all installed by .ci/install.sh (jq by the system). Missing
# tools fail the run.
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
chart="$repo/charts/wincsi"
examples="$repo/examples"
k8s_versions=(1.30.0 1.37.0)

fail() { echo "chart-check: FAIL: $*" >&2; exit 1; }
need() { command -v "$1" >/dev/null 2>&1 || fail "'$1' not found; run .ci/install.sh (and source .ci/env.sh)"; }

helm3="${WINCSI_HELM3:-helm3}"
helm4="${WINCSI_HELM4:-helm4}"
need "$helm3"; need "$helm4"; need kubernetes-validate; need yamllint; need check-jsonschema; need jq
"$helm3" version --short | grep -q '^v3\.' || fail "$helm3 is not Helm 3"
"$helm4" version --short | grep -q '^v4\.' || fail "$helm4 is not Helm 4"

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
export HELM_CACHE_HOME="$work/helm/cache" HELM_CONFIG_HOME="$work/helm/config" HELM_DATA_HOME="$work/helm/data"

passed=0
ok() { passed=$((passed + 1)); echo "ok - $*"; }

value_sets=("$chart"/ci/*-values.yaml)
[ -f "${value_sets[0]}" ] || fail "no value sets in $chart/ci"

# 1. lint
for h in "$helm3" "$helm4"; do
  for v in "${value_sets[@]}"; do
    "$h" lint --strict "$chart" -f "$v" >"$work/lint.log" 2>&1 || { cat "$work/lint.log"; fail "$h lint --strict -f ${v##*/}"; }
  done
  ok "$("$h" version --short) lint --strict (${#value_sets[@]} value sets)"
done

# 2. render every scenario with both Helms
rendered=()
for v in "${value_sets[@]}"; do
  name="$(basename "$v" -values.yaml)"
  for h in helm3 helm4; do
    bin="${!h}"
    out="$work/rendered-$name-$h.yaml"
    # The oldest Kubernetes the chart supports, the same for both Helms: their built-in default versions differ
    # (Helm 3.17: 1.32, Helm 4: newer), and the CSIDriver renders fields by version (step 3b renders the newest).
    "$bin" template wincsi "$chart" --namespace wincsi-system --kube-version "${k8s_versions[0]}" -f "$v" \
      >"$out" 2>"$work/err" \
      || { cat "$work/err"; fail "$h template $name"; }
    [ -s "$out" ] || fail "$h template $name rendered nothing"
    rendered+=("$out")
  done
  ok "template $name (helm3, helm4)"
done
# Helm 3 and Helm 4 must render the same objects (Helm 4 adds blank lines between documents).
for v in "${value_sets[@]}"; do
  name="$(basename "$v" -values.yaml)"
  diff -u -B "$work/rendered-$name-helm3.yaml" "$work/rendered-$name-helm4.yaml" >/dev/null \
    || fail "helm3 and helm4 render $name differently"
done
ok "helm3 and helm4 renders identical"

# One minimum Kubernetes version (1.30: ValidatingAdmissionPolicy v1): older clusters are refused.
for h in "$helm3" "$helm4"; do
  if "$h" template wincsi "$chart" --namespace wincsi-system --kube-version 1.29.0 >/dev/null 2>"$work/err"; then
    fail "$h rendered the chart for Kubernetes 1.29"
  fi
  grep -q 'kubeVersion' "$work/err" || { cat "$work/err"; fail "Kubernetes 1.29 refused for another reason"; }
done
[ "$(grep -c 'kind: ValidatingAdmissionPolicy$' "$work/rendered-default-helm4.yaml")" -eq 10 ] \
  || fail "expected 10 admission policies by default (5 pipe rules, 5 for unpinned objects)"
grep -q 'kind: ValidatingAdmissionPolicy' "$work/rendered-no-admission-helm4.yaml" && fail "admission policy rendered although disabled"
ok "Kubernetes >= 1.30 required; admission policies follow admissionPolicy.enabled"

# 3. strict schema validation
example_files=()
while IFS= read -r -d '' f; do example_files+=("$f"); done < <(find "$examples" -name '*.yaml' -print0 | sort -z)
[ "${#example_files[@]}" -gt 0 ] || fail "no examples found in $examples"
for k in "${k8s_versions[@]}"; do
  kubernetes-validate --strict --quiet -k "$k" "${rendered[@]}" >"$work/kv.log" 2>&1 \
    || { cat "$work/kv.log"; fail "rendered objects do not validate strictly against Kubernetes $k"; }
  kubernetes-validate --strict --quiet -k "$k" "${example_files[@]}" >"$work/kv.log" 2>&1 \
    || { cat "$work/kv.log"; fail "examples do not validate strictly against Kubernetes $k"; }
  ok "strict validation against Kubernetes $k (${#rendered[@]} renders, ${#example_files[@]} examples)"
done
# 3b. what only a newer Kubernetes gets (CSIDriver nodeAllocatableUpdatePeriodSeconds, 1.33+), rendered for the
# newest version and validated strictly against it.
newest="${k8s_versions[${#k8s_versions[@]}-1]}"
for v in "${value_sets[@]}"; do
  name="$(basename "$v" -values.yaml)"
  "$helm4" template wincsi "$chart" --namespace wincsi-system --kube-version "$newest" -f "$v" \
    >"$work/newest-$name.yaml" 2>"$work/err" || { cat "$work/err"; fail "helm4 template $name for $newest"; }
done
grep -q '^  nodeAllocatableUpdatePeriodSeconds: 60$' "$work/newest-default.yaml" \
  || fail "the CSIDriver asks for no volume-limit refresh on Kubernetes $newest"
grep -q 'nodeAllocatableUpdatePeriodSeconds' "$work/rendered-default-helm4.yaml" \
  && fail "nodeAllocatableUpdatePeriodSeconds rendered for Kubernetes ${k8s_versions[0]}, which lacks the field"
# requiresRepublish (SMB credential rotation, issue 40 item 3): off by default, on when asked.
grep -q '^  requiresRepublish: false$' "$work/rendered-default-helm4.yaml" \
  || fail "the default CSIDriver does not say requiresRepublish: false"
grep -q '^  requiresRepublish: true$' "$work/rendered-everything-helm4.yaml" \
  || fail "csiDriver.requiresRepublish=true is not rendered on the CSIDriver"
kubernetes-validate --strict --quiet -k "$newest" "$work"/newest-*.yaml >"$work/kv.log" 2>&1 \
  || { cat "$work/kv.log"; fail "renders for Kubernetes $newest do not validate strictly against it"; }
ok "renders for Kubernetes $newest validate strictly (${#value_sets[@]} value sets; the volume-limit refresh on)"
# Every example is a list of complete objects: each document names apiVersion and kind.
for f in "${example_files[@]}"; do
  docs="$(grep -c '^---' "$f" || true)"; kinds="$(grep -c '^kind:' "$f" || true)"
  [ "$docs" -eq "$kinds" ] || fail "$f: $docs documents but $kinds top-level kinds"
done

# The validator must really be strict: an unknown field and a wrong type must fail.
cat >"$work/bad-field.yaml" <<'YAML'
apiVersion: storage.k8s.io/v1
kind: CSIDriver
metadata:
  name: bad.example.com
spec:
  attachRequired: false
  atachRequired: false
YAML
cat >"$work/bad-type.yaml" <<'YAML'
apiVersion: storage.k8s.io/v1
kind: CSIDriver
metadata:
  name: bad.example.com
spec:
  attachRequired: "no"
YAML
for bad in bad-field bad-type; do
  if kubernetes-validate --strict --quiet -k 1.37.0 "$work/$bad.yaml" >/dev/null 2>&1; then
    fail "kubernetes-validate --strict accepted $bad.yaml"
  fi
done
ok "validator rejects unknown fields and wrong types"

# 4. yamllint
yamllint -s -c "$repo/charts/.yamllint" "$chart/values.yaml" "${value_sets[@]}" "${example_files[@]}" \
  || fail "yamllint"
ok "yamllint values and examples"

# 5. NOTES.txt renders and tells the operator how to check the install
"$helm4" install wincsi "$chart" --namespace wincsi-system --dry-run=client \
  --set csiProxy.install=true --set rbac.secrets.enabled=true >"$work/notes.out" 2>&1 \
  || { cat "$work/notes.out"; fail "helm install --dry-run=client"; }
for want in '^NOTES:' 'rollout status daemonset/wincsi-node' 'get csinodes' \
  'rollout status daemonset/wincsi-csi-proxy' 'Secrets in ALL namespaces' 'host backend unreachable' \
  'insufficient quota'; do
  grep -q -- "$want" "$work/notes.out" || fail "NOTES lack '$want'"
done
ok "NOTES.txt renders"

# 6. Dockerfile.windows: Linux build stage, Windows stages without RUN
dockerfile="$repo/Dockerfile.windows"
[ -f "$dockerfile" ] || fail "Dockerfile.windows missing"
awk '
  /^FROM /    { stage = $0; windows = ($0 !~ /--platform=\$BUILDPLATFORM/) }
  /^RUN /     { if (windows) { print "RUN in Windows stage: " stage; bad = 1 } }
  END         { exit bad }
' "$dockerfile" || fail "Dockerfile.windows runs commands in a Windows stage"
# shellcheck disable=SC2016 # literal $ in regexes
for want in '^FROM --platform=\$BUILDPLATFORM rust:.*-bookworm AS build' \
  '^FROM mcr.microsoft.com/windows/nanoserver:\$\{OSVERSION\} AS nanoserver' \
  'windows-host-process-containers-base-image:v1.0.0' '^FROM \$\{HOSTPROCESS_BASE\} AS hostprocess' \
  'x86_64-pc-windows-gnu -p wincsi-driver --bin wincsi-node' 'gcc-mingw-w64-x86-64'; do
  grep -Eq -- "$want" "$dockerfile" || fail "Dockerfile.windows lacks /$want/"
done
grep -q '^name = "wincsi-node"' "$repo/driver/Cargo.toml" || fail "driver/Cargo.toml has no wincsi-node binary"
ok "Dockerfile.windows stages"

# 7. the values schema rejects typos and wrong types
expect_reject() {
  local what="$1"; shift
  for h in "$helm3" "$helm4"; do
    if "$h" template wincsi "$chart" "$@" >/dev/null 2>"$work/err"; then
      fail "$what was accepted by $h ($*)"
    fi
    grep -qi 'schema' "$work/err" || { cat "$work/err"; fail "$what failed for another reason than the schema"; }
  done
  ok "schema rejects $what"
}
expect_reject "a typo in a nested key" --set driver.nmae=x
expect_reject "a typo in a top-level key" --set modee=hostProcess
expect_reject "an unknown mode" --set mode=privileged
expect_reject "a string for an integer" --set driver.maxVolumesPerNode=lots
expect_reject "a string for a boolean" --set-string csiProxy.install=yes
expect_reject "a string for requiresRepublish" --set-string csiDriver.requiresRepublish=yes
expect_reject "an invalid log level" --set driver.logLevel=verbose
expect_reject "a kubelet root without a drive" --set-string kubeletRoot=/var/lib/kubelet
expect_reject "an invalid driver name" --set driver.name=Not_A_DNS_Name
expect_reject "an unknown validation action" --set 'admissionPolicy.validationActions={Block}'
expect_reject "an unknown action for unpinned pods" --set 'admissionPolicy.unpinnedValidationActions={Block}'
expect_reject "a registry with a scheme" --set imageRegistry=https://mirror.example.com
expect_reject "an invalid priority class name" --set node.priorityClassName=Not_A_Class
expect_reject "an invalid trusted namespace" --set 'admissionPolicy.trustedNamespaces={Kube_System}'
expect_reject "maxSurge (two plugins on one node)" --set node.updateStrategy.rollingUpdate.maxSurge=1
expect_reject "maxUnavailable 0" --set node.updateStrategy.rollingUpdate.maxUnavailable=0
expect_reject "a literal bind address in csiProxy mode" --set driver.health.bindAddress=127.0.0.1
expect_reject "a PodMonitor without metrics" --set metrics.podMonitor.enabled=true
expect_reject "a Linux-only securityContext field" --set driver.securityContext.privileged=true
expect_reject "a probe timeout that is not whole seconds" --set livenessProbe.probeTimeout=1500ms

# 8. checks the schema cannot express, refused by the templates with a message
expect_fail() {
  local what="$1" want="$2"; shift 2
  for h in "$helm3" "$helm4"; do
    if "$h" template wincsi "$chart" "$@" >/dev/null 2>"$work/err"; then
      fail "$what was accepted by $h ($*)"
    fi
    grep -q -- "$want" "$work/err" || { cat "$work/err"; fail "$what failed for another reason"; }
  done
  ok "templates refuse $what"
}
expect_fail "a kubelet liveness timeout not above the sidecar's" "must be larger than livenessProbe.probeTimeout" \
  --set livenessProbe.probeTimeout=20s
expect_fail "two addresses for one shared listener" "must equal driver.health.bindAddress" \
  --set mode=hostProcess --set metrics.enabled=true --set metrics.port=29667 --set driver.health.bindAddress=127.0.0.1

# 9. the PodMonitor: only where monitoring.coreos.com/v1 PodMonitor is served
for h in "$helm3" "$helm4"; do
  with="$("$h" template wincsi "$chart" --namespace wincsi-system -f "$chart/ci/knobs-values.yaml" \
    --api-versions monitoring.coreos.com/v1/PodMonitor)"
  grep -q '^kind: PodMonitor$' <<<"$with" || fail "$h: no PodMonitor although the API is served"
  without="$("$h" template wincsi "$chart" --namespace wincsi-system -f "$chart/ci/knobs-values.yaml")"
  grep -q '^kind: PodMonitor$' <<<"$without" && fail "$h: a PodMonitor although the API is not served"
done
ok "PodMonitor follows .Capabilities"

# 10. the release workflow, offline: its schema, the tag check on this tree, the image commands
workflow="$repo/.github/workflows/release.yml"
for wf in "$workflow" "$repo/.github/workflows/test.yml"; do
  check-jsonschema --builtin-schema vendor.github-workflows "$wf" >"$work/cj.log" 2>&1 \
    || { cat "$work/cj.log"; fail "${wf##*/} does not validate against the GitHub-workflow schema"; }
done
python3 -c "import ast, sys; ast.parse(open(sys.argv[1]).read())" "$repo/scripts/release-public-check.py" \
  || fail "scripts/release-public-check.py does not parse"
image="$(sed -n 's/^  IMAGE: *\(.*\)$/\1/p' "$workflow")"
[ -n "$image" ] || fail "release.yml has no env IMAGE"
app_version="$(sed -n 's/^appVersion: *"\{0,1\}\([^"]*\)"\{0,1\}$/\1/p' "$chart/Chart.yaml")"
IMAGE="$image" HELM="$helm4" bash "$repo/scripts/release-check.sh" "v$app_version" >"$work/rc.log" 2>&1 \
  || { cat "$work/rc.log"; fail "scripts/release-check.sh refuses v$app_version on this tree"; }
if IMAGE="$image" HELM="$helm4" bash "$repo/scripts/release-check.sh" "v$app_version.1" >/dev/null 2>&1; then
  fail "scripts/release-check.sh accepted a tag the chart does not carry"
fi
IMAGE=registry.example.com/k8s/wincsi-node VERSION="$app_version" \
  bash "$repo/scripts/release-images.sh" --dry-run --out "$work/dist" >"$work/images.log"
for want in "--target binary --output type=local" \
  "--platform windows/amd64 --file Dockerfile.windows --target nanoserver --build-arg OSVERSION=1809" \
  "OSVERSION=ltsc2022" "OSVERSION=ltsc2025" \
  "--tag registry.example.com/k8s/wincsi-node:$app_version-hostprocess --push" \
  "imagetools create --tag registry.example.com/k8s/wincsi-node:$app_version -f"; do
  grep -qF -- "$want" "$work/images.log" || { cat "$work/images.log"; fail "release-images.sh lacks '$want'"; }
done
ok "release workflow: schema, tag check, image commands"

echo "chart-check: $passed passed, 0 failed"
