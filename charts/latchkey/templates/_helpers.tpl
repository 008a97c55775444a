{{- define "latchkey.name" -}}
{{- .Chart.Name | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "latchkey.fullname" -}}
{{- if contains .Chart.Name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}

{{- define "latchkey.selectorLabels" -}}
app.kubernetes.io/name: {{ include "latchkey.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "latchkey.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{ include "latchkey.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{- define "latchkey.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "latchkey.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- /* The Secret the operator keeps the admin API's serving certificate in (never rendered). */ -}}
{{- define "latchkey.adminCertSecret" -}}
{{- printf "%s-admin-serving" (include "latchkey.fullname" .) }}
{{- end }}

{{- define "latchkey.keysSecret" -}}
{{- if .Values.keys.existingSecret }}
{{- .Values.keys.existingSecret }}
{{- else }}
{{- printf "%s-keys" (include "latchkey.fullname" .) }}
{{- end }}
{{- end }}

{{/* usesSQLite is "true" when the store is the embedded SQLite database. */}}
{{- define "latchkey.usesSQLite" -}}
{{- if and (not .Values.database.existingSecret) (not (regexMatch "^postgres(ql)?://" .Values.database.url)) }}true{{ end }}
{{- end }}

{{/*
leaderElect is "true" when the controllers elect a leader. By default only with PostgreSQL: an
SQLite installation runs exactly one pod (Recreate), and a sole replica that must renew a Lease
would stop serving when the API server is unreachable for longer than the renew deadline.
*/}}
{{- define "latchkey.leaderElect" -}}
{{- $le := .Values.leaderElection.enabled }}
{{- if kindIs "invalid" $le }}
{{- if not (include "latchkey.usesSQLite" .) }}true{{ end }}
{{- else if $le }}true{{ end }}
{{- end }}

{{/* publicHost and publicPath: the public URL's host (without port) and path prefix. */}}
{{- define "latchkey.publicHost" -}}
{{- (urlParse .Values.publicURL).hostname }}
{{- end }}

{{- define "latchkey.publicPath" -}}
{{- $p := (urlParse .Values.publicURL).path | trimSuffix "/" }}
{{- if $p }}{{ $p }}{{ else }}/{{ end }}
{{- end }}

{{- define "latchkey.validate" -}}
{{- $url := .Values.publicURL | default "" }}
{{- if not $url }}
{{- fail "publicURL is required: the https address people and agents reach Latchkey at, e.g. --set publicURL=https://auth.example.com" }}
{{- end }}
{{- if not (regexMatch "^https://[^/?#@\\s]+(/[^?#\\s]*)?$" $url) }}
{{- fail (printf "publicURL %q must be an https:// URL without user info, query or fragment (issuers are {publicURL}/{namespace}/{project})" $url) }}
{{- end }}
{{- $url := .Values.database.url | default "" }}
{{- if and $url (not (regexMatch "^(sqlite:|postgres(ql)?://)" $url)) }}
{{- fail "database.url must start with sqlite: or postgres://" }}
{{- end }}
{{- if regexMatch "^postgres(ql)?://[^/@]*:[^/@]*@" $url }}
{{- fail "database.url must not carry a password (it would be visible in the Deployment): put the DSN in a Secret and set database.existingSecret" }}
{{- end }}
{{- if and (include "latchkey.usesSQLite" .) (gt (int .Values.replicaCount) 1) }}
{{- fail (printf "replicaCount=%d needs PostgreSQL: set database.existingSecret to a Secret holding a postgres:// DSN. The embedded SQLite store allows one replica." (int .Values.replicaCount)) }}
{{- end }}
{{- if and (gt (int .Values.replicaCount) 1) (not (include "latchkey.leaderElect" .)) }}
{{- fail "replicaCount > 1 needs leaderElection.enabled: only one replica may run the controllers" }}
{{- end }}
{{- if lt (int .Values.replicaCount) 1 }}
{{- fail "replicaCount must be at least 1" }}
{{- end }}
{{- if and (not .Values.keys.existingSecret) (not .Values.keys.generate) }}
{{- fail "keys.existingSecret is required when keys.generate is false" }}
{{- end }}
{{- end }}

{{/* graceSeconds is shutdown.grace ("20s", "1m") in whole seconds, rounded up. */}}
{{- define "latchkey.graceSeconds" -}}
{{- $g := toString .Values.shutdown.grace }}
{{- if regexMatch "^[0-9]+s$" $g }}{{ trimSuffix "s" $g }}
{{- else if regexMatch "^[0-9]+m$" $g }}{{ mul (trimSuffix "m" $g | int) 60 }}
{{- else }}{{ fail (printf "shutdown.grace %q: use whole seconds or minutes, e.g. 20s or 1m" $g) }}
{{- end }}
{{- end }}

{{/*
caBundle is "true" when a CA bundle is configured; it fails when more than one source is set.
*/}}
{{- define "latchkey.caBundle" -}}
{{- $c := .Values.caBundle }}
{{- $n := 0 }}
{{- range (list $c.pem $c.existingConfigMap $c.existingSecret) }}{{ if . }}{{ $n = add1 $n }}{{ end }}{{ end }}
{{- if gt $n 1 }}
{{- fail "caBundle: set only one of pem, existingConfigMap and existingSecret" }}
{{- end }}
{{- if gt $n 0 }}true{{ end }}
{{- end }}

{{/* caBundleKey is the file name of the bundle in its volume. */}}
{{- define "latchkey.caBundleKey" -}}
{{- if .Values.caBundle.pem }}ca.crt{{ else }}{{ .Values.caBundle.key }}{{ end }}
{{- end }}

{{/* caBundleVolume is the ca-bundle volume's source, or nothing without a bundle. */}}
{{- define "latchkey.caBundleVolume" -}}
{{- if .Values.caBundle.pem }}
configMap:
  name: {{ include "latchkey.fullname" . }}-ca-bundle
{{- else if .Values.caBundle.existingConfigMap }}
configMap:
  name: {{ .Values.caBundle.existingConfigMap }}
  items:
    - key: {{ .Values.caBundle.key }}
      path: {{ .Values.caBundle.key }}
{{- else if .Values.caBundle.existingSecret }}
secret:
  secretName: {{ .Values.caBundle.existingSecret }}
  items:
    - key: {{ .Values.caBundle.key }}
      path: {{ .Values.caBundle.key }}
{{- end }}
{{- end }}
