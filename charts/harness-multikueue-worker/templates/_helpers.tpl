{{- define "harness-multikueue-worker.name" -}}
{{- printf "%s-harness-operator" .Release.Name | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "harness-multikueue-worker.labels" -}}
app.kubernetes.io/name: harness-multikueue-worker
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end }}
