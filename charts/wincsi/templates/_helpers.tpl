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

{{/* The driver's --endpoint (and the sidecars' --csi-address). Every container sees the
socket at its host path (csiProxy mode mounts the directories at the same path;
HostProcess containers see the host directly), so one string serves all of them. */}}
{{- define "wincsi.endpoint" -}}
{{- printf "unix://%s" (include "wincsi.socketPath" .) }}
{{- end }}

{{/* kubelet's plugin registration directory: <kubelet-root>\plugins_registry */}}
{{- define "wincsi.registrationDir" -}}
{{- printf "%s\\plugins_registry" (include "wincsi.kubeletRoot" .) }}
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

{{- define "wincsi.image" -}}
{{- $img := .image -}}
{{- $tag := default .root.Chart.AppVersion $img.tag -}}
{{- if $img.digest -}}
{{- printf "%s@%s" $img.repository $img.digest }}
{{- else -}}
{{- printf "%s:%s%s" $img.repository $tag (default "" .suffix) }}
{{- end -}}
{{- end }}

{{/* Pod scheduling shared by the node DaemonSet and the optional csi-proxy DaemonSet. */}}
{{- define "wincsi.scheduling" -}}
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
priorityClassName: {{ .Values.node.priorityClassName | quote }}
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

{{/* True (non-empty) when the pipe admission policy is rendered. */}}
{{- define "wincsi.admissionPolicyRendered" -}}
{{- /* Discovery lists the kind on a live cluster; offline (helm template) only
group/versions are known, so fall back to the Kubernetes version (v1 is GA in 1.30). */ -}}
{{- $has := or (.Capabilities.APIVersions.Has "admissionregistration.k8s.io/v1/ValidatingAdmissionPolicy") (semverCompare ">=1.30.0-0" .Capabilities.KubeVersion.Version) }}
{{- if and .Values.admissionPolicy.enabled $has }}true{{ end }}
{{- end }}
