{{/*
Names, labels and the pieces every component shares. A "component" is one of
the four services (gateway, recall, remember, consolidator) or the migration.
*/}}

{{/* The four long-running services, in start-up order. */}}
{{- define "mneme.components" -}}
gateway recall remember consolidator
{{- end }}

{{/* Chart name, for labels. */}}
{{- define "mneme.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Prefix of every resource name: `<release>-mneme`, or the release name alone
when it already holds the chart name. Truncated so that the longest suffix
("-consolidator-metrics", 21 characters) still fits a 63-character DNS label.
*/}}
{{- define "mneme.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 42 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 42 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 42 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{/* Chart name and version, for the helm.sh/chart label. */}}
{{- define "mneme.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Labels that select one component's pods; argument: (dict "root" $ "component"
NAME), with an empty NAME for resources every component shares.
*/}}
{{- define "mneme.selectorLabels" -}}
app.kubernetes.io/name: {{ include "mneme.name" .root }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
{{- with .component }}
app.kubernetes.io/component: {{ . }}
{{- end }}
{{- end }}

{{/* Every label of a component's resources; argument as for mneme.selectorLabels. */}}
{{- define "mneme.labels" -}}
helm.sh/chart: {{ include "mneme.chart" .root }}
{{ include "mneme.selectorLabels" . }}
app.kubernetes.io/version: {{ .root.Chart.AppVersion | quote }}
app.kubernetes.io/part-of: mneme
app.kubernetes.io/managed-by: {{ .root.Release.Service }}
{{- with .root.Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/* Name of one component's resources: `<fullname>-<component>`. */}}
{{- define "mneme.componentName" -}}
{{- printf "%s-%s" (include "mneme.fullname" .root) .component }}
{{- end }}

{{/* The image reference: a digest wins over the tag, the tag defaults to appVersion. */}}
{{- define "mneme.image" -}}
{{- $image := .Values.image }}
{{- if $image.digest }}
{{- printf "%s@%s" $image.repository $image.digest }}
{{- else }}
{{- printf "%s:%s" $image.repository (default .Chart.AppVersion $image.tag) }}
{{- end }}
{{- end }}

{{- define "mneme.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "mneme.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* Name of the Secret the services read their credentials from. */}}
{{- define "mneme.secretName" -}}
{{- default (include "mneme.fullname" .) .Values.secrets.existingSecret }}
{{- end }}

{{/* Name of the Secret the migration reads MNEME_MIGRATE_DATABASE_URL from. */}}
{{- define "mneme.migrationSecretName" -}}
{{- if .Values.migrations.existingSecret }}
{{- .Values.migrations.existingSecret }}
{{- else if .Values.secrets.existingSecret }}
{{- .Values.secrets.existingSecret }}
{{- else }}
{{- printf "%s-migrate" (include "mneme.fullname" .) }}
{{- end }}
{{- end }}

{{/*
Keys of the services' Secret: the required ones, then the optional ones with
the value that fills them when the chart creates the Secret.
*/}}
{{- define "mneme.requiredSecretKeys" -}}
MNEME_DATABASE_URL MNEME_REDIS_URL MNEME_INTERNAL_TOKEN
{{- end }}

{{- define "mneme.optionalSecretValues" -}}
MNEME_OAUTH_SIGNING_KEY: {{ .Values.secrets.oauthSigningKey | quote }}
MNEME_PROXY_HEADER_KEY: {{ .Values.secrets.proxyHeaderKey | quote }}
MNEME_OPENAI_API_KEY: {{ .Values.secrets.openaiApiKey | quote }}
MNEME_LLM_API_KEY: {{ .Values.secrets.llmApiKey | quote }}
MNEME_LLM_FALLBACK_API_KEY: {{ .Values.secrets.llmFallbackApiKey | quote }}
MNEME_RERANKER_API_KEY: {{ .Values.secrets.rerankerApiKey | quote }}
{{- end }}

{{/*
Checks of values that the schema cannot express; fails the render with a
message naming the value to set.
*/}}
{{- define "mneme.validate" -}}
{{- if .Values.secrets.existingSecret }}
{{- $inline := dict "postgresql.url" .Values.postgresql.url "redis.url" .Values.redis.url "secrets.internalToken" .Values.secrets.internalToken }}
{{- range $key, $value := omit .Values.secrets "existingSecret" "annotations" "internalToken" }}
{{- $_ := set $inline (printf "secrets.%s" $key) $value }}
{{- end }}
{{- range $key, $value := $inline }}
{{- if $value }}
{{- fail (printf "%s is set, but so is secrets.existingSecret: put the value into that Secret instead (see values.yaml)" $key) }}
{{- end }}
{{- end }}
{{- else }}
{{- $_ := required "postgresql.url is required (the service role's URL), or name a Secret in secrets.existingSecret" .Values.postgresql.url }}
{{- $_ := required "redis.url is required, or name a Secret in secrets.existingSecret" .Values.redis.url }}
{{- $_ := required "secrets.internalToken is required (openssl rand -hex 32), or name a Secret in secrets.existingSecret" .Values.secrets.internalToken }}
{{- if lt (len .Values.secrets.internalToken) 32 }}
{{- fail "secrets.internalToken must be at least 32 characters (openssl rand -hex 32)" }}
{{- end }}
{{- end }}
{{- if or .Values.migrations.existingSecret .Values.secrets.existingSecret }}
{{- if .Values.postgresql.migrateUrl }}
{{- fail "postgresql.migrateUrl is set, but the migration reads an existing Secret: put MNEME_MIGRATE_DATABASE_URL into it instead" }}
{{- end }}
{{- else if .Values.migrations.enabled }}
{{- $_ := required "postgresql.migrateUrl is required (the owner role's URL for `mneme migrate`), or set migrations.existingSecret" .Values.postgresql.migrateUrl }}
{{- end }}
{{- if and .Values.ingress.enabled (not .Values.ingress.hosts) }}
{{- fail "ingress.enabled needs at least one entry in ingress.hosts" }}
{{- end }}
{{- end }}

{{/* MNEME_PUBLIC_URL: the value, else the first Ingress host (https when it has TLS). */}}
{{- define "mneme.publicUrl" -}}
{{- if .Values.publicUrl }}
{{- .Values.publicUrl | trimSuffix "/" }}
{{- else if and .Values.ingress.enabled .Values.ingress.hosts }}
{{- $host := (first .Values.ingress.hosts).host }}
{{- $scheme := "http" }}
{{- range .Values.ingress.tls }}
{{- if has $host .hosts }}
{{- $scheme = "https" }}
{{- end }}
{{- end }}
{{- printf "%s://%s" $scheme $host }}
{{- end }}
{{- end }}

{{/* MNEME_TRUSTED_PROXY_HOPS: the value, else 1 behind the Ingress and 0 without. */}}
{{- define "mneme.trustedProxyHops" -}}
{{- if kindIs "invalid" .Values.gateway.trustedProxyHops }}
{{- ternary 1 0 .Values.ingress.enabled }}
{{- else }}
{{- .Values.gateway.trustedProxyHops }}
{{- end }}
{{- end }}

{{/*
The gRPC URL of a backend as the gateway dials it; argument: (dict "root" $
"component" "recall"|"remember"). Headless: DNS answers with every ready
pod's address.
*/}}
{{- define "mneme.backendUrl" -}}
{{- $root := .root }}
{{- $name := include "mneme.componentName" . }}
{{- if eq $root.Values.gateway.backendService "headless" }}
{{- $name = printf "%s-headless" $name }}
{{- end }}
{{- $port := (index $root.Values .component).port }}
{{- printf "http://%s.%s.svc.%s:%v" $name $root.Release.Namespace $root.Values.clusterDomain $port }}
{{- end }}

{{/* Pod-template annotations that roll the pods when their configuration changes. */}}
{{- define "mneme.checksums" -}}
checksum/config: {{ include (print .Template.BasePath "/configmap.yaml") . | sha256sum }}
{{- if not .Values.secrets.existingSecret }}
checksum/secret: {{ include (print .Template.BasePath "/secret.yaml") . | sha256sum }}
{{- end }}
{{- end }}

{{/* The memory-backed /tmp every pod mounts (the root file system is read-only). */}}
{{- define "mneme.tmpVolume" -}}
- name: tmp
  emptyDir:
    medium: Memory
    sizeLimit: {{ .Values.tmpSizeLimit }}
{{- end }}

{{/*
Topology spread of one component's pods: its own constraints, else the
default soft spread; argument as for mneme.selectorLabels.
*/}}
{{- define "mneme.topologySpread" -}}
{{- $values := index .root.Values .component }}
{{- if $values.topologySpreadConstraints }}
{{- toYaml $values.topologySpreadConstraints }}
{{- else if .root.Values.topologySpread.enabled }}
- maxSkew: 1
  topologyKey: {{ .root.Values.topologySpread.topologyKey }}
  whenUnsatisfiable: {{ .root.Values.topologySpread.whenUnsatisfiable }}
  labelSelector:
    matchLabels:
      {{- include "mneme.selectorLabels" . | nindent 6 }}
{{- end }}
{{- end }}

{{/*
The probes of one service's container; argument as for mneme.selectorLabels.
The gateway has HTTP /health (alive) and /ready (PostgreSQL and both backends
answer, not draining); recall and remember serve grpc.health.v1; the
consolidator serves nothing but metrics, so its probes check that listener.
*/}}
{{- define "mneme.probes" -}}
{{- $values := index .root.Values .component }}
{{- $alive := dict }}
{{- $ready := dict }}
{{- if eq .component "gateway" }}
{{- $alive = dict "httpGet" (dict "path" "/health" "port" "http") }}
{{- $ready = dict "httpGet" (dict "path" "/ready" "port" "http") }}
{{- else if eq .component "consolidator" }}
{{- $alive = dict "tcpSocket" (dict "port" "metrics") }}
{{- $ready = $alive }}
{{- else }}
{{- $alive = dict "grpc" (dict "port" (int $values.port)) }}
{{- $ready = $alive }}
{{- end }}
startupProbe:
  {{- toYaml (merge (deepCopy $values.probes.startup) $alive) | nindent 2 }}
livenessProbe:
  {{- toYaml (merge (deepCopy $values.probes.liveness) $alive) | nindent 2 }}
readinessProbe:
  {{- toYaml (merge (deepCopy $values.probes.readiness) $ready) | nindent 2 }}
{{- end }}

{{/*
A setting's value as the string the service reads. Helm reads numbers in
values as floats, which would print 2592000 as "2.592e+06": whole numbers are
printed as integers.
*/}}
{{- define "mneme.settingValue" -}}
{{- if and (kindIs "float64" .) (eq (floor .) .) }}
{{- int64 . }}
{{- else }}
{{- toString . }}
{{- end }}
{{- end }}
