{{/*
Helpers for the wincsi chart. Every Windows path is built here once so that the
driver's --endpoint, the registrar's paths and the hostPath volumes cannot drift apart.
*/}}

{{- define "wincsi.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "wincsi.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "wincsi.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Labels shared by every object. */}}
{{- define "wincsi.labels" -}}
helm.sh/chart: {{ include "wincsi.chart" . }}
app.kubernetes.io/name: {{ include "wincsi.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: wincsi
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/* Immutable selector labels; $component is "node" or "csi-proxy". */}}
{{- define "wincsi.selectorLabels" -}}
app.kubernetes.io/name: {{ include "wincsi.name" .root }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end }}

{{- define "wincsi.nodeName" -}}
{{- printf "%s-node" (include "wincsi.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "wincsi.csiProxyName" -}}
{{- printf "%s-csi-proxy" (include "wincsi.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "wincsi.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "wincsi.nodeName" .) .Values.serviceAccount.name }}
{{- else }}
{{- required "serviceAccount.name is required when serviceAccount.create is false" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* The CSI driver name: CSIDriver object, registrar and --driver-name all use this. */}}
{{- define "wincsi.driverName" -}}
{{- .Values.driver.name }}
{{- end }}

{{/* Host kubelet root without a trailing backslash, e.g. C:\var\lib\kubelet */}}
{{- define "wincsi.kubeletRoot" -}}
{{- trimSuffix "\\" .Values.kubeletRoot }}
{{- end }}

{{/* Host directory holding the driver's socket: <kubelet-root>\plugins\<driver> */}}
{{- define "wincsi.pluginDir" -}}
{{- printf "%s\\plugins\\%s" (include "wincsi.kubeletRoot" .) (include "wincsi.driverName" .) }}
{{- end }}

{{/* Host path of the CSI socket kubelet dials: <plugin-dir>\csi.sock */}}
{{- define "wincsi.socketPath" -}}
{{- printf "%s\\csi.sock" (include "wincsi.pluginDir" .) }}
{{- end }}

{{/* Upper-case drive letter of the kubelet root. */}}
{{- define "wincsi.kubeletDrive" -}}
{{- upper (substr 0 1 (include "wincsi.kubeletRoot" .)) }}
{{- end }}

{{/*
Non-empty when csiProxy-mode containers cannot see the host directories at their own
paths: a Windows container has only a C: drive, so a mountPath on D: is refused. Then the
plugin directory is mounted at C:\csi and the registration directory at C:\registration
(the peers' layout) and only the registrar's --kubelet-registration-path keeps the host
view. HostProcess containers see the host, so they never need this.
*/}}
{{- define "wincsi.remapped" -}}
{{- if and (ne .Values.mode "hostProcess") (ne (include "wincsi.kubeletDrive" .) "C") }}true{{ end }}
{{- end }}

{{/* The plugin directory as the containers see it. */}}
{{- define "wincsi.containerPluginDir" -}}
{{- if include "wincsi.remapped" . }}C:\csi{{ else }}{{ include "wincsi.pluginDir" . }}{{ end }}
{{- end }}

{{/* The driver's --endpoint (and the sidecars' --csi-address), as the containers see the
socket: its host path (csiProxy mode mounts the directories at the same path on C:, and
HostProcess containers see the host), or C:\csi\csi.sock when the root is remapped. */}}
{{- define "wincsi.endpoint" -}}
{{- printf "unix://%s\\csi.sock" (include "wincsi.containerPluginDir" .) }}
{{- end }}

{{/* kubelet's plugin registration directory: <kubelet-root>\plugins_registry */}}
{{- define "wincsi.registrationDir" -}}
{{- printf "%s\\plugins_registry" (include "wincsi.kubeletRoot" .) }}
{{- end }}

{{/* The registration directory as the registrar container sees it. */}}
{{- define "wincsi.containerRegistrationDir" -}}
{{- if include "wincsi.remapped" . }}C:\registration{{ else }}{{ include "wincsi.registrationDir" . }}{{ end }}
{{- end }}

{{/*
Name of a cluster-scoped object of this release (admission policies, ClusterRole):
"<namespace>-<fullname>", cut so that the whole name stays within 63 characters, then a
hash of "<namespace>/<fullname>" (so two releases never share a name, whatever the cut
removed), then the suffix, never cut. Call with (dict "root" $ "suffix" "...").
*/}}
{{- define "wincsi.clusterName" -}}
{{- $full := include "wincsi.fullname" .root -}}
{{- $hash := sha256sum (printf "%s/%s" .root.Release.Namespace $full) | trunc 10 -}}
{{- $room := int (sub 63 (add 12 (len .suffix))) -}}
{{- $head := printf "%s-%s" .root.Release.Namespace $full | trunc $room | trimSuffix "-" -}}
{{- printf "%s-%s-%s" $head $hash .suffix -}}
{{- end }}

{{- define "wincsi.hostProcess" -}}
{{- if eq .Values.mode "hostProcess" }}true{{ end }}
{{- end }}

{{/*
The csi-proxy API groups/versions the driver dials (disk v1, volume v1, filesystem v1,
smb v1, iscsi v1alpha2, system v1alpha1). Pipe name: \\.\pipe\csi-proxy-<group>-<version>.
Fixed on purpose: mounting exactly what the driver uses, and nothing else.
*/}}
{{- define "wincsi.csiProxyPipes" -}}
- disk-v1
- volume-v1
- filesystem-v1
- smb-v1
- iscsi-v1alpha2
- system-v1alpha1
{{- end }}

{{/*
An image reference. `imageRegistry`, when set, replaces the registry of every image (the
first path component when it names a host: it has a "." or ":" or is "localhost"), so one
value points the whole chart at a mirror; a digest still pins the same content there.
*/}}
{{- define "wincsi.image" -}}
{{- $img := .image -}}
{{- $tag := default .root.Chart.AppVersion $img.tag -}}
{{- $repo := $img.repository -}}
{{- with .root.Values.imageRegistry -}}
{{- $parts := splitList "/" $repo -}}
{{- $first := first $parts -}}
{{- if and (gt (len $parts) 1) (or (contains "." $first) (contains ":" $first) (eq $first "localhost")) -}}
{{- $repo = join "/" (rest $parts) -}}
{{- end -}}
{{- $repo = printf "%s/%s" (trimSuffix "/" .) $repo -}}
{{- end -}}
{{- if $img.digest -}}
{{- printf "%s@%s" $repo $img.digest }}
{{- else -}}
{{- printf "%s:%s%s" $repo $tag (default "" .suffix) }}
{{- end -}}
{{- end }}

{{/*
Pod scheduling shared by the node DaemonSet and the optional csi-proxy DaemonSet.
`os.name: windows` makes the API server refuse Linux-only security fields in these pods
and lets Pod Security Admission judge them as Windows pods.
*/}}
{{- define "wincsi.scheduling" -}}
os:
  name: windows
nodeSelector:
  {{- toYaml (merge (dict "kubernetes.io/os" "windows") (deepCopy (default (dict) .Values.node.nodeSelector))) | nindent 2 }}
{{- with .Values.node.affinity }}
affinity:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.node.tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.node.priorityClassName }}
priorityClassName: {{ . | quote }}
{{- end }}
{{- with .Values.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end }}

{{/* HostProcess pod-level settings. */}}
{{- define "wincsi.hostProcessPodSettings" -}}
hostNetwork: true
dnsPolicy: ClusterFirstWithHostNet
securityContext:
  windowsOptions:
    hostProcess: true
    runAsUserName: {{ .Values.hostProcess.runAsUserName | quote }}
{{- end }}

{{/*
Non-empty when the critical-pods ResourceQuota is rendered: a system-* priority class
outside kube-system (managed platforms that limit those classes to kube-system admit them
in a namespace that has a ResourceQuota scoped to them).
*/}}
{{- define "wincsi.criticalPodsQuota" -}}
{{- if and .Values.node.criticalPodsQuota.create (hasPrefix "system-" .Values.node.priorityClassName) (ne .Release.Namespace "kube-system") }}true{{ end }}
{{- end }}

{{- define "wincsi.criticalPodsQuotaName" -}}
{{- printf "%s-critical-pods" (include "wincsi.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
The liveness timeouts nest, outermost first: kubelet's livenessProbe.probe.timeoutSeconds >
the livenessprobe sidecar's --probe-timeout (its dial plus the CSI Probe) > the driver's own
bound on Probe (800 ms; it also answers within 3/4 of the sidecar's deadline). A sidecar
timeout at or above kubelet's lets kubelet give up on /healthz while the sidecar still waits;
one at or below the driver's bound cuts healthy Probes. Renders nothing; fails on a broken chain.
*/}}
{{- define "wincsi.probeChain" -}}
{{- $t := .Values.livenessProbe.probeTimeout | toString -}}
{{- $ms := 0 -}}
{{- if hasSuffix "ms" $t -}}
{{- $ms = trimSuffix "ms" $t | int -}}
{{- else if hasSuffix "s" $t -}}
{{- $ms = mul (trimSuffix "s" $t | int) 1000 -}}
{{- else if hasSuffix "m" $t -}}
{{- $ms = mul (trimSuffix "m" $t | int) 60000 -}}
{{- end -}}
{{- $kubelet := mul (int .Values.livenessProbe.probe.timeoutSeconds) 1000 -}}
{{- if ge $ms $kubelet -}}
{{- fail (printf "livenessProbe.probeTimeout (%s) must be shorter than livenessProbe.probe.timeoutSeconds (%ds): kubelet would give up on the sidecar's /healthz before the sidecar gives up on the driver's Probe" $t (int .Values.livenessProbe.probe.timeoutSeconds)) -}}
{{- end -}}
{{- if le $ms 800 -}}
{{- fail (printf "livenessProbe.probeTimeout (%s) must be longer than 800ms, the driver's own bound on the CSI Probe" $t) -}}
{{- end -}}
{{- end }}
