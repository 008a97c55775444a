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
{{- default (include "latchkey.fullname" .) .Values.serviceAccount.name }}
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
{{- if and (not .Values.database.existingSecret) (not (hasPrefix "postgres" .Values.database.url)) }}true{{ end }}
{{- end }}

{{- define "latchkey.validate" -}}
{{- if not .Values.publicURL }}
{{- fail "publicURL is required: the https address people and agents reach Latchkey at" }}
{{- end }}
{{- if and (include "latchkey.usesSQLite" .) (gt (int .Values.replicaCount) 1) }}
{{- fail "replicaCount > 1 needs PostgreSQL (database.existingSecret): SQLite allows one replica" }}
{{- end }}
{{- if and (not .Values.keys.existingSecret) (not .Values.keys.generate) }}
{{- fail "keys.existingSecret is required when keys.generate is false" }}
{{- end }}
{{- end }}
