{{- /*
CEL pieces shared by the ValidatingAdmissionPolicies in admission-policy.yaml. Each define renders one
line of CEL (or, the runSpec* ones, a list of variables or validations); chart values enter as JSON lists,
which are CEL list literals. The pieces that read a spec take a dict with "root", the CEL path of the spec
("object.spec" for runs and definitions, "object.spec.runTemplate.spec" for a schedule's run), and
"field", how messages spell that path ("spec", "spec.runTemplate.spec").
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
{{ include "harness-operator.admission.indexes" 64 }}.filter(i, i < size({{ .root }}.?env.orValue([]))).map(i, {'field': '{{ .field }}.env[' + string(i) + '].name', 'name': string({{ .root }}.env[i].name)}) + {{ include "harness-operator.admission.indexes" 32 }}.filter(i, i < size({{ .root }}.?credentials.orValue([]))).map(i, {'field': '{{ .field }}.credentials[' + string(i) + '].env', 'name': string({{ .root }}.credentials[i].env)})
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
{{ include "harness-operator.admission.indexes" 32 }}.filter(i, i < size({{ .root }}.?credentials.orValue([]))).map(i, {'field': '{{ .field }}.credentials[' + string(i) + '].secretKeyRef', 'group': '', 'resource': 'secrets', 'kind': 'Secret', 'name': string({{ .root }}.credentials[i].secretKeyRef.name), 'hint': {{ .hint | quote }}})
{{- end -}}

{{- /* The three objects a value source (promptFrom, stdinFrom, ...) may name; unset ones have name ''. */ -}}
{{- define "harness-operator.admission.valueSourceReads" -}}
{'field': '{{ .field }}.secretKeyRef', 'group': '', 'resource': 'secrets', 'kind': 'Secret', 'name': string({{ .path }}.?secretKeyRef.?name.orValue('')), 'hint': 'ask for get on it'}, {'field': '{{ .field }}.configMapKeyRef', 'group': '', 'resource': 'configmaps', 'kind': 'ConfigMap', 'name': string({{ .path }}.?configMapKeyRef.?name.orValue('')), 'hint': 'ask for get on it'}, {'field': '{{ .field }}.runOutput', 'group': 'agentharness.dev', 'resource': 'harnessruns', 'kind': 'HarnessRun', 'name': string({{ .path }}.?runOutput.?name.orValue('')), 'hint': 'ask for get on it'}
{{- end -}}

{{- /* The objects a run's inputs (one source each) and spec.after name; unset sources have name ''. */ -}}
{{- define "harness-operator.admission.inputReads" -}}
{{- $root := .root -}}
{{- $field := .field -}}
{{- $inputs := printf "%s.filter(i, i < size(%s.?inputs.orValue([])))" (include "harness-operator.admission.indexes" 16) $root -}}
{{ $inputs }}.map(i, {'field': '{{ $field }}.inputs[' + string(i) + '].secretKeyRef', 'group': '', 'resource': 'secrets', 'kind': 'Secret', 'name': string({{ $root }}.inputs[i].?secretKeyRef.?name.orValue('')), 'hint': 'ask for get on it'}) + {{ $inputs }}.map(i, {'field': '{{ $field }}.inputs[' + string(i) + '].configMapKeyRef', 'group': '', 'resource': 'configmaps', 'kind': 'ConfigMap', 'name': string({{ $root }}.inputs[i].?configMapKeyRef.?name.orValue('')), 'hint': 'ask for get on it'}) + {{ $inputs }}.map(i, {'field': '{{ $field }}.inputs[' + string(i) + '].runOutput', 'group': 'agentharness.dev', 'resource': 'harnessruns', 'kind': 'HarnessRun', 'name': string({{ $root }}.inputs[i].?runOutput.?name.orValue('')), 'hint': 'ask for get on it'}) + {{ include "harness-operator.admission.indexes" 16 }}.filter(i, i < size({{ $root }}.?after.orValue([]))).map(i, {'field': '{{ $field }}.after[' + string(i) + ']', 'group': 'agentharness.dev', 'resource': 'harnessruns', 'kind': 'HarnessRun', 'name': string({{ $root }}.after[i]), 'hint': 'ask for get on it'})
{{- end -}}

{{- /* Every object the operator reads (or the sandbox mounts) for a run with this spec, with the
operator's rights; unset references are left out. A new input source is one more entry here. */ -}}
{{- define "harness-operator.admission.runReads" -}}
{{- $root := .root -}}
{{- $field := .field -}}
([
{{ include "harness-operator.admission.valueSourceReads" (dict "field" (printf "%s.promptFrom" $field) "path" (printf "%s.?promptFrom" $root)) }},
{{ include "harness-operator.admission.valueSourceReads" (dict "field" (printf "%s.stdinFrom" $field) "path" (printf "%s.?stdinFrom" $root)) }},
{'field': '{{ $field }}.workspace.git.credentialsSecretRef', 'group': '', 'resource': 'secrets', 'kind': 'Secret', 'name': string({{ $root }}.?workspace.?git.?credentialsSecretRef.?name.orValue('')), 'hint': 'ask for get on it'},
{'field': '{{ $field }}.workspace.publish.credentialsSecretRef', 'group': '', 'resource': 'secrets', 'kind': 'Secret', 'name': string({{ $root }}.?workspace.?publish.?credentialsSecretRef.?name.orValue('')), 'hint': 'ask for get on it'},
{'field': '{{ $field }}.workspace.from', 'group': 'agentharness.dev', 'resource': 'harnessruns', 'kind': 'HarnessRun', 'name': string({{ $root }}.?workspace.?from.?run.orValue('')), 'hint': 'ask for get on it'},
{'field': '{{ $field }}.resumeFrom', 'group': 'agentharness.dev', 'resource': 'harnessruns', 'kind': 'HarnessRun', 'name': string({{ $root }}.?resumeFrom.?run.orValue('')), 'hint': 'ask for get on it'},
{'field': '{{ $field }}.workspace.volume.persistentVolumeClaim', 'group': '', 'resource': 'persistentvolumeclaims', 'kind': 'PersistentVolumeClaim', 'name': string({{ $root }}.?workspace.?volume.?persistentVolumeClaim.?claimName.orValue('')), 'hint': 'ask for get on it'}
] + {{ include "harness-operator.admission.credentialReads" (dict "root" $root "field" $field "hint" "ask for get on it or use a definition's grant") }}
+ {{ include "harness-operator.admission.inputReads" (dict "root" $root "field" $field) }}
).filter(r, r.name != '')
{{- end -}}

{{- /*
The variables a run spec's checks use (runSpecValidations): call with (dict "ctx" $ "root" ... "field"
...). The HarnessRun policy judges object.spec, the HarnessSchedule and HarnessTrigger policies their run
template.
*/ -}}
{{- define "harness-operator.admission.runSpecVariables" -}}
- name: reads
  expression: >-
    {{- include "harness-operator.admission.runReads" . | nindent 4 }}
- name: imagePrefixes
  expression: {{ include "harness-operator.admission.imagePrefixes" .ctx | quote }}
- name: envNames
  expression: {{ include "harness-operator.admission.envNames" . | quote }}
- name: deniedEnv
  expression: {{ include "harness-operator.admission.deniedEnv" .ctx | quote }}
# The CRD's CEL cannot see the free-form keys and values of `with`, so NUL characters and oversized
# values are refused here; the check is WITH_VALUES_CHECK of api/v1alpha1.py, which `harnessctl
# validate` runs too (a unit test compares).
- name: withMaps
  expression: >-
    [{{ .root }}.?with.orValue({})]
    + {{ include "harness-operator.admission.indexes" 16 }}.filter(i, i < size({{ .root }}.?fallback.orValue([]))).map(i, {{ .root }}.fallback[i].?with.orValue({}))
- name: badWith
  expression: >-
    {{ include "harness-operator.admission.indexes" 17 }}.filter(i, i < size(variables.withMaps) && !(variables.withMaps[i].all(k, !k.contains('\u0000') && size(k) <= 253 && (type(variables.withMaps[i][k]) == string ? !variables.withMaps[i][k].contains('\u0000') && size(variables.withMaps[i][k]) <= 8192 : type(variables.withMaps[i][k]) == list ? size(variables.withMaps[i][k]) <= 64 && variables.withMaps[i][k].all(v, type(v) != string || (!v.contains('\u0000') && size(v) <= 8192)) : true))))
{{- end -}}

{{- /* A run spec's validations, over runSpecVariables: `with`, the author's reads, the image, sandbox
placement (admission.runsMaySet) and denied env names. */ -}}
{{- define "harness-operator.admission.runSpecValidations" -}}
{{- $root := .root -}}
{{- $field := .field -}}
- expression: size(variables.badWith) == 0
  messageExpression: >-
    (variables.badWith[0] == 0 ? '{{ $field }}.with' : '{{ $field }}.fallback[' + string(variables.badWith[0] - 1) + '].with')
    + ': keys and values must not contain a NUL character (a command-line argument cannot carry one); a key is at most 253 characters, a string at most 8192, a list at most 64 items'
  reason: Invalid
{{- /* 74: the most reads the CRD allows (a source each for prompt and stdin, git, publish, from, a
claim, 32 grants: 42 before inputs; a source for each of 16 inputs, 16 runs in spec.after) */}}
{{- include "harness-operator.admission.readValidations" 74 | nindent 0 }}
{{- include "harness-operator.admission.imageValidation" (dict "path" (printf "%s.?sandbox.?image" $root) "field" (printf "%s.sandbox.image" $field)) | nindent 0 }}
{{- range $name, $allowed := .ctx.Values.admission.runsMaySet }}
{{- if not $allowed }}
- expression: "!has({{ $root }}.sandbox) || !has({{ $root }}.sandbox.{{ $name }}) || size({{ $root }}.sandbox.{{ $name }}) == 0"
  message: "{{ $field }}.sandbox.{{ $name }}: runs may not set {{ $name }} in this cluster (chart value admission.runsMaySet.{{ $name }}); sandbox placement is the platform team's"
  reason: Forbidden
{{- end }}
{{- end }}
- expression: size(variables.deniedEnv) == 0
  messageExpression: {{ include "harness-operator.admission.deniedEnvMessage" .ctx | quote }}
  reason: Forbidden
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

{{- /* The address ranges no MCP server's URL may point into unless mcp.allowedCIDRs allows it: loopback,
link-local (metadata services), private, shared (CGNAT), documentation, benchmarking, multicast and
reserved ranges, and the IPv6 ones that embed an IPv4 address (NAT64, 6to4). The operator refuses the
same (core/access/mcp.py MCP_REFUSED_CIDRS; a unit test compares). */ -}}
{{- define "harness-operator.admission.mcpRefusedCIDRs" -}}
["0.0.0.0/8","10.0.0.0/8","100.64.0.0/10","127.0.0.0/8","169.254.0.0/16","172.16.0.0/12","192.0.0.0/24","192.0.2.0/24","192.88.99.0/24","192.168.0.0/16","198.18.0.0/15","198.51.100.0/24","203.0.113.0/24","224.0.0.0/4","240.0.0.0/4","::/128","::1/128","64:ff9b::/96","64:ff9b:1::/48","100::/64","2001:db8::/32","2002::/16","fc00::/7","fe80::/10","fec0::/10","ff00::/8"]
{{- end -}}
