{{/* Names. */}}
{{- define "corral.name" -}}
{{- .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "corral.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "corral.selectorLabels" -}}
app.kubernetes.io/name: {{ include "corral.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "corral.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{ include "corral.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}

{{- define "corral.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "corral.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "corral.image" -}}
{{- if .Values.image.digest -}}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest -}}
{{- else -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}
{{- end -}}

{{/* The Secret holding backend URLs, credentials and dev keys. */}}
{{- define "corral.secretName" -}}
{{- printf "%s-env" (include "corral.fullname" .) -}}
{{- end -}}

{{- define "corral.tenantsSecretName" -}}
{{- default (printf "%s-tenants" (include "corral.fullname" .)) .Values.existingTenantsSecret -}}
{{- end -}}

{{/* Whether each shared backend is configured. */}}
{{- define "corral.hasPostgres" -}}
{{- if or .Values.postgres.url .Values.postgres.existingSecret (hasPrefix "postgres" (toString (default "" .Values.config.store))) -}}true{{- end -}}
{{- end -}}
{{- define "corral.hasRedis" -}}
{{- if or .Values.redis.url .Values.redis.existingSecret (hasPrefix "redis" (toString (default "" .Values.config.state))) -}}true{{- end -}}
{{- end -}}
{{- define "corral.hasS3" -}}
{{- if or .Values.s3.url (hasPrefix "s3://" (toString (default "" .Values.config.blob))) -}}true{{- end -}}
{{- end -}}

{{/*
Refuse what cannot work: several nodes need shared records (PostgreSQL), a
shared queue and live state (Redis) and shared artifacts (S3); on the
embedded backends each node would keep its own.
*/}}
{{- define "corral.validate" -}}
{{- if lt (int .Values.replicas) 1 -}}
{{- fail "replicas must be at least 1" -}}
{{- end -}}
{{- if gt (int .Values.replicas) 1 -}}
{{- $missing := list -}}
{{- if not (include "corral.hasPostgres" .) -}}{{- $missing = append $missing "postgres (postgres.url or postgres.existingSecret)" -}}{{- end -}}
{{- if not (include "corral.hasRedis" .) -}}{{- $missing = append $missing "redis (redis.url or redis.existingSecret)" -}}{{- end -}}
{{- if not (include "corral.hasS3" .) -}}{{- $missing = append $missing "s3 (s3.url)" -}}{{- end -}}
{{- if $missing -}}
{{- fail (printf "replicas=%d needs shared backends, or each node keeps its own records, queue and artifacts; missing: %s" (int .Values.replicas) (join ", " $missing)) -}}
{{- end -}}
{{- end -}}
{{- if and .Values.s3.url (not .Values.s3.existingSecret) (or (not .Values.s3.accessKeyId) (not .Values.s3.secretAccessKey)) -}}
{{- fail "s3.url needs s3.accessKeyId and s3.secretAccessKey, or s3.existingSecret" -}}
{{- end -}}
{{- range $k := list "listen" "data_dir" "node_id" -}}
{{- if hasKey $.Values.config $k -}}
{{- fail (printf "config.%s is set by the chart" $k) -}}
{{- end -}}
{{- end -}}
{{- if not (has .Values.podAntiAffinity (list "hard" "soft" "none")) -}}
{{- fail "podAntiAffinity: hard, soft or none" -}}
{{- end -}}
{{- end -}}

{{/* The whole grace period: preStop, drain, margin. */}}
{{- define "corral.gracePeriod" -}}
{{- add (int .Values.drain.preStopSleepSeconds) (int .Values.drain.timeoutSeconds) (int .Values.drain.marginSeconds) -}}
{{- end -}}

{{/*
TOML from YAML values. Helm's toToml would write every number as a float
(values are decoded as JSON), which corral's integer settings refuse: an
integral float is written as an integer here.
*/}}
{{- define "corral.tomlKey" -}}
{{- if regexMatch "^[A-Za-z0-9_-]+$" . -}}{{ . }}{{- else -}}{{ toJson . }}{{- end -}}
{{- end -}}

{{- define "corral.tomlValue" -}}
{{- if kindIs "float64" . -}}
{{- if eq (float64 (int64 .)) . -}}{{ int64 . }}{{- else -}}{{ . }}{{- end -}}
{{- else if kindIs "slice" . -}}
[{{- range $i, $e := . -}}{{- if $i -}}, {{ end -}}{{- include "corral.tomlValue" $e -}}{{- end -}}]
{{- else if kindIs "map" . -}}
{{- $m := . -}}
{ {{- range $i, $k := keys $m | sortAlpha -}}{{- if $i -}},{{- end }} {{ include "corral.tomlKey" $k }} = {{ include "corral.tomlValue" (get $m $k) }}{{- end }} }
{{- else -}}
{{- toJson . -}}
{{- end -}}
{{- end -}}

{{- define "corral.tomlIsTables" -}}
{{- if and (kindIs "slice" .) (gt (len .) 0) (kindIs "map" (first .)) -}}true{{- end -}}
{{- end -}}

{{/* A table's scalars, then its sub-tables and arrays of tables. */}}
{{- define "corral.tomlTable" -}}
{{- $path := .path -}}
{{- $m := .map -}}
{{- range $k := keys $m | sortAlpha -}}
{{- $v := get $m $k -}}
{{- if not (or (kindIs "invalid" $v) (kindIs "map" $v) (include "corral.tomlIsTables" $v)) }}
{{ include "corral.tomlKey" $k }} = {{ include "corral.tomlValue" $v }}
{{- end -}}
{{- end -}}
{{- range $k := keys $m | sortAlpha -}}
{{- $v := get $m $k -}}
{{- $sub := include "corral.tomlKey" $k -}}
{{- if $path -}}{{- $sub = printf "%s.%s" $path $sub -}}{{- end -}}
{{- if kindIs "map" $v }}

[{{ $sub }}]
{{- include "corral.tomlTable" (dict "path" $sub "map" $v) -}}
{{- else if include "corral.tomlIsTables" $v -}}
{{- range $e := $v }}

[[{{ $sub }}]]
{{- include "corral.tomlTable" (dict "path" $sub "map" $e) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* corral.toml: the values' config with the chart's own settings. */}}
{{- define "corral.configToml" -}}
{{- $cfg := deepCopy .Values.config -}}
{{- $_ := set $cfg "listen" (printf "0.0.0.0:%d" (int .Values.service.port)) -}}
{{- $_ := set $cfg "data_dir" "/var/lib/corral" -}}
{{- if .Values.s3.url -}}{{- $_ := set $cfg "blob" .Values.s3.url -}}
{{- /* With a shared S3 store a drain (helm upgrade) moves live sandboxes
to the other pods, unless config.sessions.snapshots says otherwise. */ -}}
{{- $sessions := deepCopy (default dict $cfg.sessions) -}}
{{- if not (hasKey $sessions "snapshots") -}}{{- $_ := set $sessions "snapshots" true -}}{{- end -}}
{{- $_ := set $cfg "sessions" $sessions -}}
{{- end -}}
# corral serve's configuration, rendered by the Helm chart from its values
# (config). The store and state URLs come from the environment
# (CORRAL_STORE, CORRAL_STATE: a Secret); tenants are appended from their
# Secret when the pod starts.
{{- include "corral.tomlTable" (dict "path" "" "map" $cfg) }}
{{ end -}}

{{/* The environment both containers share. */}}
{{- define "corral.env" -}}
- name: CORRAL_NODE_ID
  valueFrom:
    fieldRef:
      fieldPath: metadata.name
- name: CORRAL_DRAIN_TIMEOUT
  value: {{ printf "%ds" (int .Values.drain.timeoutSeconds) | quote }}
{{- with .Values.postgres.existingSecret }}
- name: CORRAL_STORE
  valueFrom:
    secretKeyRef: {name: {{ . }}, key: {{ $.Values.postgres.existingSecretKey }}}
{{- end }}
{{- with .Values.redis.existingSecret }}
- name: CORRAL_STATE
  valueFrom:
    secretKeyRef: {name: {{ . }}, key: {{ $.Values.redis.existingSecretKey }}}
{{- end }}
{{- with .Values.s3.existingSecret }}
- name: AWS_ACCESS_KEY_ID
  valueFrom:
    secretKeyRef: {name: {{ . }}, key: AWS_ACCESS_KEY_ID}
- name: AWS_SECRET_ACCESS_KEY
  valueFrom:
    secretKeyRef: {name: {{ . }}, key: AWS_SECRET_ACCESS_KEY}
{{- end }}
{{- end -}}
