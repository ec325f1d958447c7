{{/* Chart name, at most 63 characters. */}}
{{- define "sglang-watchdog.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Full name of the release's objects (and the Prometheus job name). A release
named after the chart ("sglang-watchdog") gets exactly that, which the plain
manifests in deploy/kubernetes use too.
*/}}
{{- define "sglang-watchdog.fullname" -}}
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

{{- define "sglang-watchdog.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* The component label: the mode. */}}
{{- define "sglang-watchdog.component" -}}
{{- if eq .Values.mode "single" }}central{{ else }}{{ .Values.mode }}{{ end }}
{{- end }}

{{- define "sglang-watchdog.selectorLabels" -}}
app.kubernetes.io/name: {{ include "sglang-watchdog.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: {{ include "sglang-watchdog.component" . }}
{{- end }}

{{- define "sglang-watchdog.labels" -}}
helm.sh/chart: {{ include "sglang-watchdog.chart" . }}
{{ include "sglang-watchdog.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: sglang-watchdog
{{- end }}

{{- define "sglang-watchdog.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "sglang-watchdog.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "sglang-watchdog.image" -}}
{{- if .Values.image.digest }}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}
{{- end }}

{{/* The Secret holding the credentials. */}}
{{- define "sglang-watchdog.secretName" -}}
{{- if .Values.secrets.create }}
{{- printf "%s-secrets" (include "sglang-watchdog.fullname" .) }}
{{- else }}
{{- required "secrets.existingSecret is required (or secrets.create with secrets.values)" .Values.secrets.existingSecret }}
{{- end }}
{{- end }}

{{/* Lease and state ConfigMap names (HA). */}}
{{- define "sglang-watchdog.leaseName" -}}
{{- include "sglang-watchdog.fullname" . }}
{{- end }}
{{- define "sglang-watchdog.stateConfigMap" -}}
{{- printf "%s-state" (include "sglang-watchdog.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Whether the pods talk to the Kubernetes API. */}}
{{- define "sglang-watchdog.needsAPI" -}}
{{- if or (eq .Values.mode "ha") .Values.kubernetesDiscovery.enabled }}true{{ end }}
{{- end }}

{{/* Checks of the values that templates cannot express in a schema. */}}
{{- define "sglang-watchdog.validate" -}}
{{- if not (has .Values.mode (list "single" "ha" "sidecar")) }}
{{- fail (printf "mode must be single, ha or sidecar, not %q" .Values.mode) }}
{{- end }}
{{- if not (has .Values.monitoring.kind (list "ServiceMonitor" "PodMonitor")) }}
{{- fail (printf "monitoring.kind must be ServiceMonitor or PodMonitor, not %q" .Values.monitoring.kind) }}
{{- end }}
{{- if and (eq .Values.mode "ha") (lt (int .Values.ha.replicas) 2) }}
{{- fail "mode ha needs ha.replicas >= 2" }}
{{- end }}
{{- if and .Values.heartbeat.enabled (not .Values.secrets.keys.heartbeatURL) }}
{{- fail "heartbeat.enabled needs secrets.keys.heartbeatURL (the Secret key holding the URL)" }}
{{- end }}
{{- if and .Values.secrets.create (not .Values.secrets.values) }}
{{- fail "secrets.create needs secrets.values; or set secrets.existingSecret to a Secret you create" }}
{{- end }}
{{- if and (ne .Values.mode "sidecar") (not .Values.config.targets) (not .Values.kubernetesDiscovery.enabled) (not (dig "discovery" "dns" nil .Values.config)) }}
{{- fail "no targets: set config.targets, or kubernetesDiscovery.enabled, or config.discovery.dns" }}
{{- end }}
{{- end }}

{{/* watchdog.yaml: .Values.config plus the sections the chart manages. */}}
{{- define "sglang-watchdog.config" -}}
{{- $cfg := deepCopy (.Values.config | default dict) }}
{{- if eq .Values.mode "sidecar" }}
{{- if not $cfg.targets }}
{{- $_ := set $cfg "targets" (list (dict "name" "local" "url" (printf "http://localhost:%v" .Values.sidecar.sglang.port) "kind" "engine")) }}
{{- end }}
{{- else if not $cfg.targets }}
{{- $_ := unset $cfg "targets" }}
{{- end }}
{{- if .Values.externalURL }}
{{- $_ := set $cfg "external_url" .Values.externalURL }}
{{- end }}
{{- if eq .Values.mode "ha" }}
{{- $ha := dict "enabled" true "lease_name" (include "sglang-watchdog.leaseName" .) "state_configmap" (include "sglang-watchdog.stateConfigMap" .) }}
{{- with .Values.ha.leaseDuration }}{{ $_ := set $ha "lease_duration" . }}{{ end }}
{{- with .Values.ha.renewDeadline }}{{ $_ := set $ha "renew_deadline" . }}{{ end }}
{{- with .Values.ha.retryPeriod }}{{ $_ := set $ha "retry_period" . }}{{ end }}
{{- $_ := set $cfg "ha" (merge $ha (get $cfg "ha" | default dict)) }}
{{- end }}
{{- if .Values.kubernetesDiscovery.enabled }}
{{- $d := get $cfg "discovery" | default dict }}
{{- $k := dict "label_selector" .Values.kubernetesDiscovery.labelSelector "port" (toString .Values.kubernetesDiscovery.port) }}
{{- with .Values.kubernetesDiscovery.namespaces }}{{ $_ := set $k "namespaces" . }}{{ end }}
{{- $_ := set $d "kubernetes" (merge $k (get $d "kubernetes" | default dict)) }}
{{- $_ := set $cfg "discovery" $d }}
{{- end }}
{{- if .Values.heartbeat.enabled }}
{{- $_ := set $cfg "heartbeat" (dict "enabled" true "interval" .Values.heartbeat.interval "method" .Values.heartbeat.method "url_file" (printf "/etc/watchdog/secrets/%s" .Values.secrets.keys.heartbeatURL)) }}
{{- end }}
{{- toYaml $cfg }}
{{- end }}

{{/*
The watchdog container, shared by the Deployment (single, ha) and the
sidecar example. Call with (dict "root" $ "resources" ... "stateDir" ...).
*/}}
{{- define "sglang-watchdog.container" -}}
{{- $root := .root }}
{{- $v := $root.Values }}
{{- $keys := $v.secrets.keys }}
{{- $secret := include "sglang-watchdog.secretName" $root -}}
- name: watchdog
  image: {{ include "sglang-watchdog.image" $root }}
  imagePullPolicy: {{ $v.image.pullPolicy }}
  env:
    - name: WATCHDOG_CONFIG
      value: /etc/watchdog/watchdog.yaml
    - name: WATCHDOG_LISTEN_ADDRESS
      value: ":9402"
    {{- /* Page links start with http://POD_IP:9402 while externalURL is
    unset: the pod name, the fallback, rarely resolves. */}}
    - name: POD_IP
      valueFrom:
        fieldRef:
          fieldPath: status.podIP
    - name: WATCHDOG_LOG_LEVEL
      value: {{ $v.logLevel | quote }}
    {{- with .stateDir }}
    - name: WATCHDOG_STATE_DIR
      value: {{ . }}
    {{- end }}
    {{- if eq $v.mode "ha" }}
    - name: POD_NAME
      valueFrom:
        fieldRef:
          fieldPath: metadata.name
    - name: POD_NAMESPACE
      valueFrom:
        fieldRef:
          fieldPath: metadata.namespace
    {{- end }}
    {{- with $keys.slackBotToken }}
    - name: SLACK_BOT_TOKEN_FILE
      value: /etc/watchdog/secrets/{{ . }}
    {{- end }}
    {{- with $keys.slackChannel }}
    - name: SLACK_CHANNEL
      valueFrom:
        secretKeyRef:
          name: {{ $secret }}
          key: {{ . }}
    {{- end }}
    {{- with $keys.slackWebhookURL }}
    - name: SLACK_WEBHOOK_URL_FILE
      value: /etc/watchdog/secrets/{{ . }}
    {{- end }}
    {{- with $keys.pagerdutyRoutingKey }}
    - name: PAGERDUTY_ROUTING_KEY_FILE
      value: /etc/watchdog/secrets/{{ . }}
    {{- end }}
    {{- with $v.extraEnv }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
  ports:
    - name: http-metrics
      containerPort: 9402
      protocol: TCP
  livenessProbe:
    httpGet:
      path: /healthz
      port: http-metrics
    periodSeconds: 10
    timeoutSeconds: 3
    failureThreshold: 3
  readinessProbe:
    httpGet:
      path: /readyz
      port: http-metrics
    periodSeconds: 5
    timeoutSeconds: 3
    failureThreshold: 3
  {{- with .resources }}
  resources:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  securityContext:
    runAsNonRoot: true
    runAsUser: 65532
    runAsGroup: 65532
    readOnlyRootFilesystem: true
    allowPrivilegeEscalation: false
    privileged: false
    capabilities:
      drop: ["ALL"]
    seccompProfile:
      type: RuntimeDefault
  volumeMounts:
    - name: watchdog-config
      mountPath: /etc/watchdog
      readOnly: true
    {{- with .stateDir }}
    - name: watchdog-state
      mountPath: {{ . }}
    {{- end }}
    - name: watchdog-tmp
      mountPath: /tmp
{{- end }}

{{/* The watchdog's volumes, except the state volume. */}}
{{- define "sglang-watchdog.volumes" -}}
{{- $v := .Values }}
{{- $keys := $v.secrets.keys }}
{{- $secret := include "sglang-watchdog.secretName" . -}}
- name: watchdog-config
  projected:
    defaultMode: 0440
    sources:
      - configMap:
          name: {{ include "sglang-watchdog.fullname" . }}-config
          items:
            - key: watchdog.yaml
              path: watchdog.yaml
      {{- $files := list }}
      {{- range $k := list $keys.slackBotToken $keys.slackWebhookURL $keys.pagerdutyRoutingKey }}
      {{- if $k }}{{ $files = append $files $k }}{{ end }}
      {{- end }}
      {{- if and $v.heartbeat.enabled $keys.heartbeatURL }}
      {{- $files = append $files $keys.heartbeatURL }}
      {{- end }}
      {{- if $files }}
      - secret:
          name: {{ $secret }}
          items:
            {{- range $files }}
            - key: {{ . }}
              path: secrets/{{ . }}
            {{- end }}
      {{- end }}
- name: watchdog-tmp
  emptyDir:
    sizeLimit: 16Mi
{{- end }}
