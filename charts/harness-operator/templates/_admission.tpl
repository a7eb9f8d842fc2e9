{{- /*
CEL pieces shared by the two ValidatingAdmissionPolicies in admission-policy.yaml. Each define renders one
line of CEL; chart values enter as JSON lists, which are CEL list literals.
*/ -}}

{{- /* The image prefixes allowed: admission.allowedImagePrefixes, else the sandbox image's registry path
(imageRegistry with the defaults: the chart's own images, the catalog's included). */ -}}
{{- define "harness-operator.admission.imagePrefixes" -}}
{{- $prefixes := .Values.admission.allowedImagePrefixes -}}
{{- if not $prefixes -}}
{{- $image := include "harness-operator.sandboxImage" . -}}
{{- if contains "/" $image -}}
{{- $prefixes = list (regexReplaceAll "[^/]*$" $image "") -}}
{{- else -}}
{{- $repository := regexReplaceAll "[:@].*$" $image "" -}}
{{- $prefixes = list (printf "%s:" $repository) (printf "%s@" $repository) -}}
{{- end -}}
{{- end -}}
{{- toJson $prefixes -}}
{{- end -}}

{{- /* [0, 1, ..., n-1]: CEL has no index range, so the list fields' indexes come from a literal. */ -}}
{{- define "harness-operator.admission.indexes" -}}
{{- toJson (until (int .)) -}}
{{- end -}}

{{- /* Every env name a run or definition sets, with its field path (same paths in both kinds). */ -}}
{{- define "harness-operator.admission.envNames" -}}
{{ include "harness-operator.admission.indexes" 64 }}.filter(i, i < size(object.spec.?env.orValue([]))).map(i, {'field': 'spec.env[' + string(i) + '].name', 'name': string(object.spec.env[i].name)}) + {{ include "harness-operator.admission.indexes" 32 }}.filter(i, i < size(object.spec.?credentials.orValue([]))).map(i, {'field': 'spec.credentials[' + string(i) + '].env', 'name': string(object.spec.credentials[i].env)})
{{- end -}}

{{- /* Those of them admission.deniedEnvNames refuses; a trailing '*' is a prefix. */ -}}
{{- define "harness-operator.admission.deniedEnv" -}}
{{- $exact := list -}}
{{- $prefixes := list -}}
{{- range .Values.admission.deniedEnvNames -}}
{{- if hasSuffix "*" . -}}
{{- $prefixes = append $prefixes (trimSuffix "*" .) -}}
{{- else -}}
{{- $exact = append $exact . -}}
{{- end -}}
{{- end -}}
variables.envNames.filter(e, e.name in {{ toJson $exact }} || {{ toJson $prefixes }}.exists(p, e.name.startsWith(p)))
{{- end -}}

{{- define "harness-operator.admission.deniedEnvMessage" -}}
variables.deniedEnv[0].field + ': "' + variables.deniedEnv[0].name + '" is refused in this cluster (chart value admission.deniedEnvNames): it changes what code the sandbox runs (dynamic loader, interpreter, shell or git), not how the agent behaves' + (size(variables.deniedEnv) > 1 ? ' (' + string(size(variables.deniedEnv)) + ' names refused: ' + variables.deniedEnv.map(e, e.field).join(', ') + ')' : '')
{{- end -}}

{{- /* The Secrets a definition's or run's credential grants name (same paths in both kinds). */ -}}
{{- define "harness-operator.admission.credentialReads" -}}
{{ include "harness-operator.admission.indexes" 32 }}.filter(i, i < size(object.spec.?credentials.orValue([]))).map(i, {'field': 'spec.credentials[' + string(i) + '].secretKeyRef', 'group': '', 'resource': 'secrets', 'kind': 'Secret', 'name': string(object.spec.credentials[i].secretKeyRef.name), 'hint': {{ .hint | quote }}})
{{- end -}}

{{- /* The three objects a value source (promptFrom, stdinFrom, ...) may name; unset ones have name ''. */ -}}
{{- define "harness-operator.admission.valueSourceReads" -}}
{'field': '{{ .field }}.secretKeyRef', 'group': '', 'resource': 'secrets', 'kind': 'Secret', 'name': string({{ .path }}.?secretKeyRef.?name.orValue('')), 'hint': 'ask for get on it'}, {'field': '{{ .field }}.configMapKeyRef', 'group': '', 'resource': 'configmaps', 'kind': 'ConfigMap', 'name': string({{ .path }}.?configMapKeyRef.?name.orValue('')), 'hint': 'ask for get on it'}, {'field': '{{ .field }}.runOutput', 'group': 'agentharness.dev', 'resource': 'harnessruns', 'kind': 'HarnessRun', 'name': string({{ .path }}.?runOutput.?name.orValue('')), 'hint': 'ask for get on it'}
{{- end -}}

{{- /* The objects a run's inputs (one source each) and spec.after name; unset sources have name ''. */ -}}
{{- define "harness-operator.admission.inputReads" -}}
{{- $inputs := printf "%s.filter(i, i < size(object.spec.?inputs.orValue([])))" (include "harness-operator.admission.indexes" 16) -}}
{{ $inputs }}.map(i, {'field': 'spec.inputs[' + string(i) + '].secretKeyRef', 'group': '', 'resource': 'secrets', 'kind': 'Secret', 'name': string(object.spec.inputs[i].?secretKeyRef.?name.orValue('')), 'hint': 'ask for get on it'}) + {{ $inputs }}.map(i, {'field': 'spec.inputs[' + string(i) + '].configMapKeyRef', 'group': '', 'resource': 'configmaps', 'kind': 'ConfigMap', 'name': string(object.spec.inputs[i].?configMapKeyRef.?name.orValue('')), 'hint': 'ask for get on it'}) + {{ $inputs }}.map(i, {'field': 'spec.inputs[' + string(i) + '].runOutput', 'group': 'agentharness.dev', 'resource': 'harnessruns', 'kind': 'HarnessRun', 'name': string(object.spec.inputs[i].?runOutput.?name.orValue('')), 'hint': 'ask for get on it'}) + {{ include "harness-operator.admission.indexes" 16 }}.filter(i, i < size(object.spec.?after.orValue([]))).map(i, {'field': 'spec.after[' + string(i) + ']', 'group': 'agentharness.dev', 'resource': 'harnessruns', 'kind': 'HarnessRun', 'name': string(object.spec.after[i]), 'hint': 'ask for get on it'})
{{- end -}}

{{- /*
One validation per entry of variables.reads, up to . entries: the requesting user must be allowed to get
it. One each, because a messageExpression may not call the authorizer, so only a validation that checks
one entry can name it. A last validation fails closed should a spec ever name more.
*/ -}}
{{- define "harness-operator.admission.readValidations" -}}
{{- range $i := until (int .) }}
- expression: >-
    size(variables.reads) <= {{ $i }} || authorizer.group(variables.reads[{{ $i }}].group).resource(variables.reads[{{ $i }}].resource).namespace(request.namespace).name(variables.reads[{{ $i }}].name).check('get').allowed()
  messageExpression: >-
    variables.reads[{{ $i }}].field + ': user "' + request.userInfo.username + '" may not get ' + variables.reads[{{ $i }}].kind + ' "' + variables.reads[{{ $i }}].name + '" in namespace "' + request.namespace + '"; ' + variables.reads[{{ $i }}].hint
  reason: Forbidden
{{- end }}
- expression: size(variables.reads) <= {{ . }}
  message: this object names more Secrets, ConfigMaps or runs than the chart's admission policy checks ({{ . }}); refused
  reason: Forbidden
{{- end -}}

{{- /* An image field ('path') checked against the allowed prefixes; 'field' names it in the message. */ -}}
{{- define "harness-operator.admission.imageValidation" -}}
- expression: "{{ .path }}.orValue('') == '' || variables.imagePrefixes.exists(p, {{ .path }}.value().startsWith(p))"
  messageExpression: >-
    '{{ .field }}: image "' + {{ .path }}.value() + '" is not allowed in this cluster; it must start with '
    + variables.imagePrefixes.map(p, '"' + p + '"').join(' or ') + ' (chart value admission.allowedImagePrefixes)'
  reason: Forbidden
{{- end -}}
