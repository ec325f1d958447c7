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

{{/* The check values.schema.json cannot express: somewhere to watch. */}}
{{- define "sglang-watchdog.validate" -}}
{{- if and (ne .Values.mode "sidecar") (not .Values.config.targets) (not .Values.kubernetesDiscovery.enabled) (not (dig "discovery" "dns" nil .Values.config)) }}
{{- fail "no targets: set config.targets, or kubernetesDiscovery.enabled, or config.discovery.dns" }}
{{- end }}
{{- end }}

{{/* "true" when the platform assigns UIDs and groups (OpenShift). */}}
{{- define "sglang-watchdog.openshift" -}}
{{- if or (eq (toString .Values.openshift) "true") (and (eq (toString .Values.openshift) "auto") (.Capabilities.APIVersions.Has "security.openshift.io/v1")) }}true{{ end }}
{{- end }}

{{/*
A securityContext from values, without the fixed IDs on OpenShift (its
restricted SCC rejects a UID outside the namespace's range). Call with
(dict "root" $ "context" .Values.podSecurityContext).
*/}}
{{- define "sglang-watchdog.securityContext" -}}
{{- $sc := deepCopy (.context | default dict) }}
{{- if include "sglang-watchdog.openshift" .root }}
{{- $sc = omit $sc "runAsUser" "runAsGroup" "fsGroup" }}
{{- end }}
{{- toYaml $sc }}
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
{{- $k := dict "label_selector" .Values.kubernetesDiscovery.labelSelector "port" (toString .Values.kubernetesDiscovery.port) "watch_nodes" .Values.kubernetesDiscovery.watchNodes }}
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
  {{- with $v.extraArgs }}
  args:
    {{- toYaml . | nindent 4 }}
  {{- end }}
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
          optional: true
    {{- end }}
    {{- with $keys.slackWebhookURL }}
    - name: SLACK_WEBHOOK_URL_FILE
      value: /etc/watchdog/secrets/{{ . }}
    {{- end }}
    {{- with $keys.pagerdutyRoutingKey }}
    - name: PAGERDUTY_ROUTING_KEY_FILE
      value: /etc/watchdog/secrets/{{ . }}
    {{- end }}
    {{- /* Go's soft memory limit at the container's: the garbage collector
    works harder near the limit instead of the kernel OOM-killing the
    container (in sidecar mode, a restart makes the serving pod NotReady
    until the watchdog runs again). An extraEnv GOMEMLIMIT wins. */}}
    {{- $extraEnvNames := list }}
    {{- range $v.extraEnv }}{{ $extraEnvNames = append $extraEnvNames .name }}{{ end }}
    {{- if and (dig "limits" "memory" "" (.resources | default dict)) (not (has "GOMEMLIMIT" $extraEnvNames)) }}
    - name: GOMEMLIMIT
      valueFrom:
        resourceFieldRef:
          resource: limits.memory
    {{- end }}
    {{- with $v.extraEnv }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
  {{- with $v.envFrom }}
  envFrom:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  ports:
    - name: http-metrics
      containerPort: 9402
      protocol: TCP
  {{- with $v.livenessProbe }}
  livenessProbe:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- /* A sidecar's startup and readiness would gate the serving pod's. */}}
  {{- if and $v.startupProbe (ne $v.mode "sidecar") }}
  startupProbe:
    {{- toYaml $v.startupProbe | nindent 4 }}
  {{- end }}
  {{- if and $v.readinessProbe (ne $v.mode "sidecar") }}
  readinessProbe:
    {{- toYaml $v.readinessProbe | nindent 4 }}
  {{- end }}
  {{- with .resources }}
  resources:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  securityContext:
    {{- include "sglang-watchdog.securityContext" (dict "root" $root "context" $v.securityContext) | nindent 4 }}
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
    {{- with $v.extraVolumeMounts }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
{{- end }}

{{/* The watchdog's volumes, except the state volume. */}}
{{- define "sglang-watchdog.volumes" -}}
{{- $v := .Values }}
{{- $keys := $v.secrets.keys }}
{{- $secret := include "sglang-watchdog.secretName" . -}}
- name: watchdog-config
  projected:
    {{- /* A sidecar's pod has no fsGroup for the watchdog's group, so the
    files are world-readable; the volume is mounted into the watchdog only. */}}
    defaultMode: {{ if eq $v.mode "sidecar" }}0444{{ else }}0440{{ end }}
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
          optional: true
          items:
            {{- range $files }}
            - key: {{ . }}
              path: secrets/{{ . }}
            {{- end }}
      {{- end }}
- name: watchdog-tmp
  emptyDir:
    sizeLimit: 16Mi
{{- with $v.extraVolumes }}
{{ toYaml . }}
{{- end }}
{{- end }}
