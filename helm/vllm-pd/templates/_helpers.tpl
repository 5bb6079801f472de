{{/*
Chart label value.
*/}}
{{- define "vllm-pd.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/*
Labels on every object of the release.
*/}}
{{- define "vllm-pd.commonLabels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: vllm-canary
helm.sh/chart: {{ include "vllm-pd.chart" . }}
canary.vllm.dev/run: {{ .Values.run | quote }}
{{- end -}}

{{/*
Selector labels of one role of one cell. Call with (dict "root" $ "cell" $cell "role" "prefill").
*/}}
{{- define "vllm-pd.selectorLabels" -}}
app.kubernetes.io/name: {{ .root.Chart.Name }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
canary.vllm.dev/cell: {{ .cell.name }}
canary.vllm.dev/role: {{ .role }}
{{- end -}}

{{/*
All labels of one role of one cell.
*/}}
{{- define "vllm-pd.cellLabels" -}}
{{ include "vllm-pd.commonLabels" .root }}
app.kubernetes.io/component: {{ .role }}
canary.vllm.dev/cell: {{ .cell.name }}
canary.vllm.dev/role: {{ .role }}
canary.vllm.dev/topology: {{ .cell.topology }}
canary.vllm.dev/image: {{ include "vllm-pd.roleImageKey" . | default "unknown" | quote }}
{{- end -}}

{{/*
Image, image key and model runner of one role: decode may differ in a mixed pair (a rolling upgrade
that reached one side first: cells[].decodeImage / decodeImageKey / decodeRunner).
*/}}
{{- define "vllm-pd.roleImage" -}}
{{- if and (eq .role "decode") .cell.decodeImage }}{{ .cell.decodeImage }}{{ else }}{{ .cell.image }}{{ end -}}
{{- end -}}
{{- define "vllm-pd.roleImageKey" -}}
{{- if and (eq .role "decode") .cell.decodeImageKey }}{{ .cell.decodeImageKey }}{{ else }}{{ .cell.imageKey }}{{ end -}}
{{- end -}}
{{- define "vllm-pd.roleRunner" -}}
{{- if and (eq .role "decode") .cell.decodeRunner }}{{ .cell.decodeRunner }}{{ else }}{{ .cell.runner }}{{ end -}}
{{- end -}}

{{/*
Annotations that describe a cell (label values cannot hold the dotted id).
*/}}
{{- define "vllm-pd.cellAnnotations" -}}
canary.vllm.dev/cell-id: {{ .cell.id | quote }}
canary.vllm.dev/model: {{ .cell.model | quote }}
canary.vllm.dev/attention-backend: {{ .cell.attentionBackend | quote }}
canary.vllm.dev/prefill-block-size: {{ .cell.prefillBlockSize | int | quote }}
canary.vllm.dev/decode-block-size: {{ .cell.decodeBlockSize | int | quote }}
canary.vllm.dev/kv-cache-dtype: {{ .cell.kvCacheDtype | quote }}
canary.vllm.dev/runner: {{ include "vllm-pd.roleRunner" . | quote }}
canary.vllm.dev/image-ref: {{ include "vllm-pd.roleImage" . | quote }}
{{- if eq .cell.topology "pd-nixl" }}
canary.vllm.dev/nixl-placement: {{ include "vllm-pd.placement" . | quote }}
canary.vllm.dev/ucx-tls: {{ include "vllm-pd.ucxTls" . | quote }}
{{- end }}
{{- $series := .cell.patchSeriesSha256 }}
{{- if and (eq .role "decode") .cell.decodeImage }}{{ $series = .cell.decodePatchSeriesSha256 }}{{ end }}
{{- with $series }}
canary.vllm.dev/patch-series-sha256: {{ . | quote }}
{{- end }}
{{- with .cell.risks }}
canary.vllm.dev/risks: {{ join "," . | quote }}
{{- end }}
{{- end -}}

{{/*
Name of the object of one role of one cell; fails the render when it is not a valid DNS label.
Call with (dict "root" $ "cell" $cell "role" "prefill" "max" 63).
*/}}
{{- define "vllm-pd.objectName" -}}
{{- $name := printf "%s%s-%s" .root.Values.namePrefix .cell.name .role -}}
{{- $max := .max | default 63 -}}
{{- if gt (len $name) (int $max) -}}
{{- fail (printf "object name %q of cell %q is %d characters, the limit here is %d: shorten namePrefix or the cell name" $name .cell.id (len $name) (int $max)) -}}
{{- end -}}
{{- if not (regexMatch "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$" $name) -}}
{{- fail (printf "object name %q of cell %q is not a DNS-1123 label" $name .cell.id) -}}
{{- end -}}
{{- $name -}}
{{- end -}}

{{/*
The --block-size of one role: prefill and aggregated use prefillBlockSize, decode decodeBlockSize.
*/}}
{{- define "vllm-pd.blockSize" -}}
{{- if eq .role "decode" -}}{{ .cell.decodeBlockSize | int }}{{- else -}}{{ .cell.prefillBlockSize | int }}{{- end -}}
{{- end -}}

{{/*
--tensor-parallel-size of a role: decode's decodeTensorParallelSize where the cell gives one (a P/D shape
such as 2p1d), else the cell's tensorParallelSize, else the chart's.
*/}}
{{- define "vllm-pd.tensorParallelSize" -}}
{{- if and (eq .role "decode") (hasKey .cell "decodeTensorParallelSize") -}}
{{- .cell.decodeTensorParallelSize | int -}}
{{- else -}}
{{- .cell.tensorParallelSize | default .root.Values.vllm.tensorParallelSize | int -}}
{{- end -}}
{{- end -}}

{{/*
GPUs per pod of a role: decode's decodeGpus where the cell gives one, else the cell's gpus, else the chart's.
*/}}
{{- define "vllm-pd.gpus" -}}
{{- if and (eq .role "decode") (hasKey .cell "decodeGpus") -}}
{{- .cell.decodeGpus | int -}}
{{- else -}}
{{- ternary .cell.gpus .root.Values.vllm.gpus (hasKey .cell "gpus") | int -}}
{{- end -}}
{{- end -}}

{{/*
Placement of a P/D cell's decode pod relative to its prefill pod: the cell's nixl.placement, else
the chart's (same-node | cross-node).
*/}}
{{- define "vllm-pd.placement" -}}
{{- (.cell.nixl | default dict).placement | default .root.Values.nixl.placement -}}
{{- end -}}

{{/*
UCX_TLS of a P/D cell: the cell's nixl.ucxTls, else the chart's nixl.ucx.tls.
*/}}
{{- define "vllm-pd.ucxTls" -}}
{{- $nixl := .cell.nixl | default dict -}}
{{- if hasKey $nixl "ucxTls" -}}{{- $nixl.ucxTls -}}{{- else -}}{{- .root.Values.nixl.ucx.tls -}}{{- end -}}
{{- end -}}

{{/*
The NIXL progress floor of a P/D cell (microseconds): the cell's nixl.progressDelayUs, else the chart's.
*/}}
{{- define "vllm-pd.progressDelayUs" -}}
{{- $nixl := .cell.nixl | default dict -}}
{{- if hasKey $nixl "progressDelayUs" -}}{{- int $nixl.progressDelayUs -}}{{- else -}}{{- int .root.Values.nixl.progressDelayUs -}}{{- end -}}
{{- end -}}

{{/*
"true" when the vLLM pods mount the engine site (the ConfigMap of sitecustomize.py and the layout
probe): for the layout probe, or for a NIXL progress floor, which sitecustomize.py installs.
Call with the root context.
*/}}
{{- define "vllm-pd.engineSite" -}}
{{- $on := .Values.vllm.layoutProbe.enabled -}}
{{- if gt (int .Values.nixl.progressDelayUs) 0 }}{{ $on = true }}{{ end -}}
{{- range .Values.cells }}
{{- $nixl := .nixl | default dict -}}
{{- if gt (int ($nixl.progressDelayUs | default 0)) 0 }}{{ $on = true }}{{ end -}}
{{- end -}}
{{- if $on }}true{{ end -}}
{{- end -}}

{{/*
Scheduling of a vLLM pod of one role (a YAML dict: nodeSelector, tolerations, affinity,
priorityClassName): the chart's settings, and for the decode pods of a P/D cell a required pod
affinity (same-node) or anti-affinity (cross-node) to the cell's prefill pods on
kubernetes.io/hostname. Only decode carries the rule: prefill schedules first, decode follows (two
pods that each require the other could never be placed). Multi-node groups span nodes, so
same-node fails the render for them. Call with (dict "root" $ "cell" $cell "role" $role "multiNode" bool).
*/}}
{{- define "vllm-pd.vllmScheduling" -}}
{{- $root := .root -}}
{{- $sched := dict "nodeSelector" $root.Values.nodeSelector "tolerations" $root.Values.tolerations "priorityClassName" $root.Values.priorityClassName -}}
{{- $affinity := deepCopy ($root.Values.affinity | default dict) -}}
{{- if eq .cell.topology "pd-nixl" -}}
{{- $placement := include "vllm-pd.placement" . -}}
{{- if and .multiNode (eq $placement "same-node") -}}
{{- fail (printf "cell %q: placement same-node cannot hold multi-node prefill and decode groups on one node; use cross-node" .cell.id) -}}
{{- end -}}
{{- if eq .role "decode" -}}
{{- $term := dict "topologyKey" "kubernetes.io/hostname" "labelSelector" (dict "matchLabels" (dict "app.kubernetes.io/name" $root.Chart.Name "app.kubernetes.io/instance" $root.Release.Name "canary.vllm.dev/cell" .cell.name "canary.vllm.dev/role" "prefill")) -}}
{{- $kind := ternary "podAffinity" "podAntiAffinity" (eq $placement "same-node") -}}
{{- $rules := deepCopy (get $affinity $kind | default dict) -}}
{{- $required := get $rules "requiredDuringSchedulingIgnoredDuringExecution" | default list -}}
{{- $_ := set $rules "requiredDuringSchedulingIgnoredDuringExecution" (append $required $term) -}}
{{- $_ := set $affinity $kind $rules -}}
{{- end -}}
{{- end -}}
{{- $_ := set $sched "affinity" $affinity -}}
{{- toYaml $sched -}}
{{- end -}}

{{/*
The multi-node settings of a cell (the cell's own, else the chart-wide ones) as YAML.
*/}}
{{- define "vllm-pd.multiNode" -}}
{{- $mn := deepCopy .root.Values.multiNode -}}
{{- with .cell.multiNode -}}{{- $mn = mergeOverwrite $mn (deepCopy .) -}}{{- end -}}
{{- toYaml $mn -}}
{{- end -}}

{{/*
ServiceAccount name.
*/}}
{{- define "vllm-pd.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- .Values.serviceAccount.name | default (printf "%s-vllm-pd" .Release.Name | trunc 63 | trimSuffix "-") -}}
{{- else -}}
{{- .Values.serviceAccount.name | default "default" -}}
{{- end -}}
{{- end -}}

{{/*
The model-cache claim name.
*/}}
{{- define "vllm-pd.modelCacheClaim" -}}
{{- .Values.modelCache.existingClaim | default (printf "%s-model-cache" .Release.Name | trunc 63 | trimSuffix "-") -}}
{{- end -}}

{{/*
vLLM server args of one role of one cell (a YAML list). Call with (dict "root" $ "cell" $cell "role" $role "extra" list).
*/}}
{{/*
A port of one role of one cell: the cell's `ports.<role>.<name>` when given (hostNetwork pods of
one node must not share ports), else the chart-wide one. Call with the role context plus "port":
http or nixl for vLLM servers, http or metrics for routers.
*/}}
{{- define "vllm-pd.port" -}}
{{- $defaults := dict "http" .root.Values.vllm.port "nixl" .root.Values.nixl.sideChannelPort -}}
{{- if eq .role "router" -}}
{{- $defaults = dict "http" .root.Values.router.port "metrics" .root.Values.router.metricsPort -}}
{{- end -}}
{{- dig .role .port (get $defaults .port) (.cell.ports | default dict) | int -}}
{{- end -}}

{{- define "vllm-pd.vllmArgs" -}}
{{- $v := .root.Values.vllm -}}
{{- if eq $v.modelArg "flag" }}
- --model
{{- end }}
- {{ .cell.modelSource | quote }}
- --served-model-name
- {{ .cell.model | quote }}
- --host
- "0.0.0.0"
- --port
- {{ include "vllm-pd.port" (merge (dict "port" "http") .) | quote }}
- --attention-backend
- {{ .cell.attentionBackend | quote }}
- --block-size
- {{ include "vllm-pd.blockSize" . | quote }}
- --kv-cache-dtype
- {{ .cell.kvCacheDtype | quote }}
- --max-model-len
- {{ .cell.maxModelLen | default $v.maxModelLen | int | quote }}
- --tensor-parallel-size
- {{ include "vllm-pd.tensorParallelSize" . | quote }}
- --gpu-memory-utilization
- {{ $v.gpuMemoryUtilization | toString | quote }}
{{- with $v.disableAccessLogForEndpoints }}
- --disable-access-log-for-endpoints
- {{ join "," . | quote }}
{{- end }}
{{- if ne .role "aggregated" }}
- --kv-transfer-config
- {{ dict "kv_connector" "NixlConnector" "kv_role" "kv_both" "kv_buffer_device" .root.Values.nixl.kvBufferDevice | toJson | quote }}
{{- end }}
{{- range .extra }}
- {{ . | quote }}
{{- end }}
{{- range $v.extraArgs }}
- {{ . | quote }}
{{- end }}
{{- range .cell.extraArgs }}
- {{ . | quote }}
{{- end }}
{{- end -}}

{{/*
vLLM server env of one role of one cell (a YAML list).
*/}}
{{- define "vllm-pd.vllmEnv" -}}
- name: VLLM_USE_V2_MODEL_RUNNER
  value: {{ if eq (include "vllm-pd.roleRunner" .) "v2" }}"1"{{ else }}"0"{{ end }}
- name: VLLM_NO_USAGE_STATS
  value: "1"
- name: DO_NOT_TRACK
  value: "1"
- name: HOME
  value: /home/vllm-canary
- name: XDG_CACHE_HOME
  value: /home/vllm-canary/.cache
- name: TORCHINDUCTOR_CACHE_DIR
  value: /home/vllm-canary/.cache/torchinductor
- name: USER
  value: vllm
- name: TMPDIR
  value: /tmp
{{- if ne .role "aggregated" }}
- name: VLLM_NIXL_SIDE_CHANNEL_HOST
  valueFrom:
    fieldRef:
      fieldPath: status.podIP
- name: VLLM_NIXL_SIDE_CHANNEL_PORT
  value: {{ include "vllm-pd.port" (merge (dict "port" "nixl") .) | quote }}
{{- with include "vllm-pd.ucxTls" . }}
- name: UCX_TLS
  value: {{ . | quote }}
{{- end }}
{{- with .root.Values.nixl.ucx.netDevices }}
- name: UCX_NET_DEVICES
  value: {{ . | quote }}
{{- end }}
{{- range $name, $value := .root.Values.nixl.ucx.env }}
- name: {{ $name }}
  value: {{ $value | toString | quote }}
{{- end }}
{{- $floor := include "vllm-pd.progressDelayUs" . }}
{{- if gt (int $floor) 0 }}
- name: CANARY_NIXL_PROGRESS_DELAY_US
  value: {{ $floor | quote }}
{{- end }}
{{- end }}
{{- if .root.Values.hfToken.secretName }}
- name: HF_TOKEN_PATH
  value: /var/run/secrets/huggingface/token
{{- end }}
{{- if .root.Values.modelCache.enabled }}
- name: HF_HOME
  value: {{ printf "%s/huggingface" .root.Values.modelCache.mountPath | quote }}
{{- end }}
{{- if include "vllm-pd.engineSite" .root }}
- name: PYTHONPATH
  value: /opt/vllm-canary/probe
{{- end }}
{{- if .root.Values.vllm.layoutProbe.enabled }}
- name: CANARY_LAYOUT_DIR
  value: /tmp/canary-layout
{{- end }}
{{- with .root.Values.vllm.env }}
{{ toYaml . }}
{{- end }}
{{- with (get .root.Values.vllm.roleEnv .role) }}
{{ toYaml . }}
{{- end }}
{{- with .cell.env }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/*
Volume mounts of a vLLM container.
*/}}
{{- define "vllm-pd.vllmVolumeMounts" -}}
- name: shm
  mountPath: /dev/shm
{{- if include "vllm-pd.engineSite" . }}
- name: layout-probe
  mountPath: /opt/vllm-canary/probe
  readOnly: true
{{- end }}
- name: home
  mountPath: /home/vllm-canary
- name: tmp
  mountPath: /tmp
{{- if .Values.hfToken.secretName }}
- name: hf-token
  mountPath: /var/run/secrets/huggingface
  readOnly: true
{{- end }}
{{- if .Values.modelCache.enabled }}
- name: model-cache
  mountPath: {{ .Values.modelCache.mountPath }}
{{- end }}
{{- end -}}

{{/*
Volumes of a vLLM pod.
*/}}
{{- define "vllm-pd.vllmVolumes" -}}
- name: shm
  emptyDir:
    medium: Memory
    sizeLimit: {{ .Values.vllm.shmSize }}
{{- if include "vllm-pd.engineSite" . }}
- name: layout-probe
  configMap:
    name: {{ include "vllm-pd.layoutProbeName" . }}
{{- end }}
- name: home
  emptyDir:
    sizeLimit: {{ .Values.vllm.cacheSize }}
- name: tmp
  emptyDir:
    sizeLimit: 10Gi
{{- if .Values.hfToken.secretName }}
- name: hf-token
  secret:
    secretName: {{ .Values.hfToken.secretName }}
    defaultMode: 0440
    items:
      - key: {{ .Values.hfToken.secretKey }}
        path: token
{{- end }}
{{- if .Values.modelCache.enabled }}
- name: model-cache
  persistentVolumeClaim:
    claimName: {{ include "vllm-pd.modelCacheClaim" . }}
{{- end }}
{{- end -}}

{{/*
Container securityContext of vLLM (IPC_LOCK added for RDMA).
*/}}
{{- define "vllm-pd.vllmSecurityContext" -}}
{{- $sc := deepCopy .root.Values.securityContext -}}
{{- if and .root.Values.nixl.rdma.enabled (ne .role "aggregated") -}}
{{- $caps := $sc.capabilities | default dict -}}
{{- $_ := set $caps "add" (list "IPC_LOCK") -}}
{{- $_ := set $sc "capabilities" $caps -}}
{{- end -}}
{{- toYaml $sc -}}
{{- end -}}

{{/*
Resources of a vLLM container: the chart's, plus GPUs (and RDMA devices for P/D roles).
*/}}
{{- define "vllm-pd.vllmResources" -}}
{{- $res := deepCopy .root.Values.vllm.resources -}}
{{- $limits := $res.limits | default dict -}}
{{- $requests := $res.requests | default dict -}}
{{- $gpus := include "vllm-pd.gpus" . | int -}}
{{- if gt $gpus 0 -}}
{{- $_ := set $limits .root.Values.vllm.gpuResourceName $gpus -}}
{{- $_ := set $requests .root.Values.vllm.gpuResourceName $gpus -}}
{{- end -}}
{{- if and .root.Values.nixl.rdma.enabled (ne .role "aggregated") -}}
{{- $_ := set $limits .root.Values.nixl.rdma.resourceName (.root.Values.nixl.rdma.count | int) -}}
{{- $_ := set $requests .root.Values.nixl.rdma.resourceName (.root.Values.nixl.rdma.count | int) -}}
{{- end -}}
{{- $_ := set $res "limits" $limits -}}
{{- $_ := set $res "requests" $requests -}}
{{- toYaml $res -}}
{{- end -}}

{{/*
Probes of a vLLM server: the startup probe's budget is the model-load deadline.
*/}}
{{- define "vllm-pd.vllmProbes" -}}
{{- $v := .Values.vllm -}}
{{- $period := $v.probePeriodSeconds | int -}}
startupProbe:
  httpGet:
    path: /health
    port: http
  periodSeconds: {{ $period }}
  timeoutSeconds: 5
  failureThreshold: {{ div (add ($v.startupTimeoutSeconds | int) (sub $period 1)) $period }}
readinessProbe:
  httpGet:
    path: /health
    port: http
  periodSeconds: {{ $period }}
  timeoutSeconds: 5
  failureThreshold: 3
livenessProbe:
  httpGet:
    path: /health
    port: http
  periodSeconds: {{ mul $period 3 }}
  timeoutSeconds: 10
  failureThreshold: {{ $v.livenessFailureThreshold | int }}
{{- end -}}

{{/*
Pod-level settings shared by every pod. Call with (dict "root" $ "sched" $values) where $values
holds nodeSelector, tolerations, affinity, priorityClassName (the chart's for vLLM pods, the
router's own for routers, which need no GPU node).
*/}}
{{- define "vllm-pd.podCommon" -}}
{{- $root := .root -}}
serviceAccountName: {{ include "vllm-pd.serviceAccountName" $root }}
automountServiceAccountToken: false
enableServiceLinks: false
{{- if $root.Values.hostNetwork }}
hostNetwork: true
dnsPolicy: ClusterFirstWithHostNet
{{- end }}
securityContext:
  {{- toYaml $root.Values.podSecurityContext | nindent 2 }}
{{- with $root.Values.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .sched.priorityClassName }}
priorityClassName: {{ . }}
{{- end }}
{{- with .sched.nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .sched.tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .sched.affinity }}
affinity:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}


{{/*
Name of the ConfigMap that carries the engine site: sitecustomize.py and the KV layout probe (one per release).
*/}}
{{- define "vllm-pd.layoutProbeName" -}}
{{- printf "%s-layout-probe" .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/*
The NetworkPolicyPeer of the canary controller (a YAML dict): pods with
networkPolicy.controller.podLabels, in networkPolicy.controller.namespace when one is given (the
controller runs in another namespace), else in this release's namespace.
*/}}
{{- define "vllm-pd.controllerPeer" -}}
{{- $c := .Values.networkPolicy.controller -}}
{{- if not $c.podLabels -}}
{{- fail "networkPolicy.controller.podLabels is empty: it would admit every pod; give labels only the canary controller's pod carries" -}}
{{- end -}}
podSelector:
  matchLabels:
    {{- toYaml $c.podLabels | nindent 4 }}
{{- with $c.namespace }}
namespaceSelector:
  matchLabels:
    kubernetes.io/metadata.name: {{ . | quote }}
{{- end }}
{{- end -}}
