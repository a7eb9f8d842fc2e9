{{- define "harness-operator.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "harness-operator.labels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "harness-operator.selectorLabels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "harness-operator.serviceAccountName" -}}
{{- default (include "harness-operator.fullname" .) .Values.serviceAccount.name -}}
{{- end -}}

{{/* An image of the chart's: "repository@digest" when imageDigests names its digest (a release's values
do), else "repository:tag". Takes a dict: ctx (the root), name (its name under imageRegistry), repository
(empty: <imageRegistry>/<name>) and tag (empty: the chart's appVersion). */}}
{{- define "harness-operator.imageRef" -}}
{{- $repository := .repository | default (printf "%s/%s" .ctx.Values.imageRegistry .name) -}}
{{- with get .ctx.Values.imageDigests .name -}}
{{- printf "%s@%s" $repository . -}}
{{- else -}}
{{- printf "%s:%s" $repository (.tag | default .ctx.Chart.AppVersion) -}}
{{- end -}}
{{- end -}}

{{/* The operator image: <imageRegistry>/harness-operator:<appVersion> unless values name another. */}}
{{- define "harness-operator.image" -}}
{{- include "harness-operator.imageRef" (dict "ctx" . "name" "harness-operator" "repository" .Values.image.repository "tag" .Values.image.tag) -}}
{{- end -}}

{{/* The sandbox image of providers that name none. */}}
{{- define "harness-operator.sandboxImage" -}}
{{- .Values.sandboxImage | default (include "harness-operator.imageRef" (dict "ctx" . "name" "sandbox")) -}}
{{- end -}}

{{/* The egress gateway: its name, its pods' labels (never the operator's selector) and its image. */}}
{{- define "harness-operator.gatewayName" -}}
{{- printf "%s-egress" (include "harness-operator.fullname" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* The egress gateway's key Secret: the user's (egressGateway.existingKeySecret), else the chart's. */}}
{{- define "harness-operator.gatewayKeySecret" -}}
{{- .Values.egressGateway.existingKeySecret | default (printf "%s-key" (include "harness-operator.gatewayName" .)) -}}
{{- end -}}

{{- define "harness-operator.gatewaySelectorLabels" -}}
app.kubernetes.io/name: harness-egress-gateway
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: egress-gateway
{{- end -}}

{{- define "harness-operator.gatewayImage" -}}
{{- include "harness-operator.imageRef" (dict "ctx" . "name" "harness-gateway" "repository" .Values.egressGateway.image.repository "tag" .Values.egressGateway.image.tag) -}}
{{- end -}}

{{/* The model gateway: its name, its pods' labels, its store's name and image. It runs from the
operator's image (one Python program of the package); its store is Debian's Redis. */}}
{{- define "harness-operator.modelGatewayName" -}}
{{- printf "%s-model" (include "harness-operator.fullname" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* The model gateway's key Secret: the user's (modelGateway.existingKeySecret), else the chart's. */}}
{{- define "harness-operator.modelGatewayKeySecret" -}}
{{- .Values.modelGateway.existingKeySecret | default (printf "%s-key" (include "harness-operator.modelGatewayName" .)) -}}
{{- end -}}

{{- define "harness-operator.modelGatewaySelectorLabels" -}}
app.kubernetes.io/name: harness-model-gateway
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: model-gateway
{{- end -}}

{{- define "harness-operator.modelStoreSelectorLabels" -}}
app.kubernetes.io/name: harness-model-store
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: model-store
{{- end -}}

{{- define "harness-operator.modelStoreImage" -}}
{{- include "harness-operator.imageRef" (dict "ctx" . "name" "harness-store" "repository" .Values.modelGateway.store.image.repository "tag" .Values.modelGateway.store.image.tag) -}}
{{- end -}}

{{/* The trigger receiver: its name and its pods' labels. It runs from the operator's image. */}}
{{- define "harness-operator.receiverName" -}}
{{- printf "%s-receiver" (include "harness-operator.fullname" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "harness-operator.receiverSelectorLabels" -}}
app.kubernetes.io/name: harness-trigger-receiver
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: trigger-receiver
{{- end -}}

{{/* A binding's scope: the namespaces this release watches (watchNamespaces), so another release's
namespaces keep their own guardrails; every namespace when it watches all. */}}
{{- define "harness-operator.admissionNamespaces" -}}
{{- with .Values.watchNamespaces -}}
matchResources:
  namespaceSelector:
    matchExpressions:
      - key: kubernetes.io/metadata.name
        operator: In
        values: {{ toJson . }}
{{- end }}
{{- end -}}

{{/* Replicas of one Deployment spread over nodes where the scheduler can (a one-node cluster still
schedules them all). Call with (dict "labels" (include "<selector labels>" .)). */}}
{{- define "harness-operator.spreadOverNodes" -}}
topologySpreadConstraints:
  - maxSkew: 1
    topologyKey: kubernetes.io/hostname
    whenUnsatisfiable: ScheduleAnyway
    labelSelector:
      matchLabels:
        {{- .labels | nindent 8 }}
{{- end -}}

{{/* The operator's ServiceAccount as the API server names it in request.userInfo.username. */}}
{{- define "harness-operator.serviceAccountUser" -}}
{{- printf "system:serviceaccount:%s:%s" .Release.Namespace (include "harness-operator.serviceAccountName" .) -}}
{{- end -}}

{{/* The sandbox pods a gateway admits: those labelled as the operator's (a label the admission policy
<release>-operator-pods lets only the operator's Jobs give their pods), in the namespaces this release
watches (watchNamespaces; every namespace when it watches all). */}}
{{- define "harness-operator.sandboxPeer" -}}
{{- if .Values.watchNamespaces }}
- namespaceSelector:
    matchExpressions:
      - {key: kubernetes.io/metadata.name, operator: In, values: {{ toJson .Values.watchNamespaces }}}
{{- else }}
- namespaceSelector: {}
{{- end }}
  podSelector:
    matchLabels: {app.kubernetes.io/managed-by: harness-operator}
{{- end -}}
