{{- define "canary.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 52 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 52 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "canary.labels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: vllm-canary
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end -}}

{{- define "canary.selectorLabels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: controller
{{- end -}}

{{- define "canary.targetNamespace" -}}
{{- .Values.targetNamespace | default .Release.Namespace -}}
{{- end -}}

{{- define "canary.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- .Values.serviceAccount.name | default (include "canary.fullname" .) -}}
{{- else -}}
{{- required "serviceAccount.name is required when serviceAccount.create is false" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "canary.image" -}}
{{- if .Values.image.digest -}}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest -}}
{{- else -}}
{{- printf "%s:%s" .Values.image.repository .Values.image.tag -}}
{{- end -}}
{{- end -}}

{{/*
The run's deadline: target.kubernetes.job_deadline_s of the config the controller runs (one
source of truth: `canary plan` and the runner read the same key). 14400 is the key's default in
canary/config/__init__.py (tests/k8s/test_k8s_waves.py keeps the two equal).
*/}}
{{- define "canary.jobDeadline" -}}
{{- $cfg := fromYaml (.Values.config | default "") -}}
{{- dig "target" "kubernetes" "job_deadline_s" 14400 $cfg | int -}}
{{- end -}}

{{/*
"true" when the config gives target.kubernetes.gpu_budget: the controller then deploys the cells
itself, wave by wave (a writer Role, the rotation state volume, the vllm-pd values file).
*/}}
{{- define "canary.plan.waves" -}}
{{- $cfg := fromYaml (.Values.config | default "") -}}
{{- if dig "target" "kubernetes" "gpu_budget" "" $cfg -}}true{{- end -}}
{{- end -}}

{{/*
The vllm-pd release whose cells are checked: targetRelease, else (waves: the controller deploys them)
the config's target.kubernetes.release (its default: vllm-pd). configmap.yaml refuses a config without
a gpu_budget when targetRelease is empty: there would be nothing to check.
*/}}
{{- define "canary.targetRelease" -}}
{{- $cfg := fromYaml (.Values.config | default "") -}}
{{- .Values.targetRelease | default (dig "target" "kubernetes" "release" "vllm-pd" $cfg) -}}
{{- end -}}

{{/*
The cells' model-cache claim (modelCache, waves only): the given one, else the chart's (kept).
*/}}
{{- define "canary.modelCacheClaim" -}}
{{- .Values.modelCache.existingClaim | default (printf "%s-model-cache" (include "canary.fullname" .)) -}}
{{- end -}}

{{/*
The claim that holds /results (results.persistence): the given one, else the chart's.
*/}}
{{- define "canary.resultsClaim" -}}
{{- .Values.results.persistence.existingClaim | default (printf "%s-results" (include "canary.fullname" .)) -}}
{{- end -}}

{{/*
The controller pod template (CronJob and one-shot Job).
*/}}
{{- define "canary.podTemplate" -}}
metadata:
  labels:
    {{- include "canary.labels" . | nindent 4 }}
    app.kubernetes.io/component: controller
    {{- with .Values.podLabels }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
  annotations:
    checksum/config: {{ .Values.config | sha256sum }}
    {{- with .Values.podAnnotations }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
spec:
  restartPolicy: Never
  serviceAccountName: {{ include "canary.serviceAccountName" . }}
  # The controller reads pods, logs and services with this token (its Role, nothing more).
  automountServiceAccountToken: true
  enableServiceLinks: false
  securityContext:
    {{- toYaml .Values.podSecurityContext | nindent 4 }}
  {{- with .Values.imagePullSecrets }}
  imagePullSecrets:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with .Values.nodeSelector }}
  nodeSelector:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with .Values.tolerations }}
  tolerations:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with .Values.affinity }}
  affinity:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  containers:
    - name: canary
      image: {{ include "canary.image" . | quote }}
      imagePullPolicy: {{ .Values.image.pullPolicy }}
      args:
        - run
        - /etc/canary/config.yaml
        - --results-dir
        - /results
        - --set
        - target.kind=kubernetes
        - --set
        - {{ printf "target.kubernetes.namespace=%s" (include "canary.targetNamespace" .) | quote }}
        - --set
        - {{ printf "target.kubernetes.release=%s" (include "canary.targetRelease" .) | quote }}
        - --set
        - target.kubernetes.in_cluster=true
        {{- if include "canary.plan.waves" . }}
        - --set
        - target.kubernetes.rotation.state_file=/var/lib/canary/rotation.json
        - --set
        - target.kubernetes.chart_values=[/etc/canary/vllm-pd-values.yaml]
        {{- end }}
        {{- range .Values.extraArgs }}
        - {{ . | quote }}
        {{- end }}
      env:
        - name: PUSHGATEWAY_URL
          value: {{ .Values.pushgateway.url | quote }}
        - name: CANARY_NAMESPACE
          valueFrom:
            fieldRef:
              fieldPath: metadata.namespace
        - name: HOME
          value: /tmp
        {{- range $name, $key := .Values.secrets.env }}
        - name: {{ $name }}
          valueFrom:
            secretKeyRef:
              name: {{ required "secrets.existingSecret: name the Secret whose keys secrets.env maps to variables" $.Values.secrets.existingSecret }}
              key: {{ $key | quote }}
        {{- end }}
        {{- with .Values.extraEnv }}
        {{- toYaml . | nindent 8 }}
        {{- end }}
      resources:
        {{- toYaml .Values.resources | nindent 8 }}
      securityContext:
        {{- toYaml .Values.securityContext | nindent 8 }}
      volumeMounts:
        - name: config
          mountPath: /etc/canary
          readOnly: true
        {{- if .Values.results.persistence.enabled }}
        - name: results
          mountPath: /results
        {{- else }}
        - name: scratch
          mountPath: /results
          subPath: results
        {{- end }}
        - name: scratch
          mountPath: /tmp
          subPath: tmp
        - name: scratch
          mountPath: /opt/canary/app/.cache
          subPath: cache
        {{- if include "canary.plan.waves" . }}
        - name: state
          mountPath: /var/lib/canary
        {{- end }}
        {{- with .Values.extraVolumeMounts }}
        {{- toYaml . | nindent 8 }}
        {{- end }}
  volumes:
    - name: config
      configMap:
        name: {{ include "canary.fullname" . }}-config
    - name: scratch
      emptyDir:
        sizeLimit: {{ .Values.scratchSize }}
    {{- if .Values.results.persistence.enabled }}
    # Results and the run history (export.history.path, relative to /results) outlive the Job.
    - name: results
      persistentVolumeClaim:
        claimName: {{ include "canary.resultsClaim" . }}
    {{- end }}
    {{- if include "canary.plan.waves" . }}
    # The rotation state (each cell's last check) must outlive the Job.
    - name: state
      persistentVolumeClaim:
        claimName: {{ .Values.state.existingClaim | default (printf "%s-state" (include "canary.fullname" .)) }}
    {{- end }}
    {{- with .Values.extraVolumes }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
{{- end -}}

{{/*
Relabelings that put the canary's cell id, role and image on scraped series. Argument: "pod" or
"service" (whose labels and annotations Prometheus exposes).
*/}}
{{- define "canary.cellRelabelings" -}}
- sourceLabels: [__meta_kubernetes_{{ . }}_annotation_canary_vllm_dev_cell_id]
  targetLabel: cell
  action: replace
- sourceLabels: [__meta_kubernetes_{{ . }}_label_canary_vllm_dev_role]
  targetLabel: role
  action: replace
- sourceLabels: [__meta_kubernetes_{{ . }}_label_canary_vllm_dev_image]
  targetLabel: image
  action: replace
- sourceLabels: [__meta_kubernetes_{{ . }}_label_canary_vllm_dev_run]
  targetLabel: canary_run
  action: replace
{{- end -}}
