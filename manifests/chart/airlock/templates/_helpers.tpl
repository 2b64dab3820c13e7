{{/*
The labels every object carries: the two the kustomize tree sets (name and, for the operator's
objects, component) and Helm's own. The selector labels are the kustomize tree's only, so that a
release can take over an install made with `kubectl apply -k manifests/` (selectors are immutable).
*/}}
{{- define "airlock.helmLabels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
{{- end }}

{{- define "airlock.selectorLabels" -}}
app.kubernetes.io/name: airlock
app.kubernetes.io/component: operator
{{- end }}

{{/* Labels of the operator's objects. */}}
{{- define "airlock.labels" -}}
{{ include "airlock.selectorLabels" . }}
{{ include "airlock.helmLabels" . }}
{{- end }}

{{/* Labels of the objects that are not the operator's (the sample class, the registry). */}}
{{- define "airlock.sandboxLabels" -}}
app.kubernetes.io/name: airlock
{{ include "airlock.helmLabels" . }}
{{- end }}

{{/* The operator's image. */}}
{{- define "airlock.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end }}

{{/* The TLS mode the operator runs with: cert-manager's certificate is served as files. */}}
{{- define "airlock.tlsMode" -}}
{{- if .Values.certManager.enabled -}}
files
{{- else -}}
{{ .Values.operator.tls.mode }}
{{- end -}}
{{- end }}

{{/* The Secret mounted for --tls-mode=files. */}}
{{- define "airlock.tlsSecret" -}}
{{- if .Values.certManager.enabled -}}
airlock-sandbox-api-cert
{{- else -}}
{{ .Values.operator.tls.existingSecret }}
{{- end -}}
{{- end }}

{{/*
Checks of values that involve more than one value (values.schema.json checks each value alone):
each fails the render with one line that names the values.
*/}}
{{- define "airlock.validate" -}}
{{- $o := .Values.operator -}}
{{- if and (not $o.leaderElection.enabled) (gt (int $o.replicas) 1) -}}
{{- fail (printf "operator.replicas is %d with operator.leaderElection.enabled false: every replica would run the controllers; set replicas to 1 or enable leader election" (int $o.replicas)) -}}
{{- end -}}
{{- if and .Values.certManager.enabled (ne $o.tls.mode "self-signed") -}}
{{- fail (printf "certManager.enabled is true with operator.tls.mode %q: cert-manager's certificate is served with mode files, set by the chart; leave operator.tls.mode at self-signed" $o.tls.mode) -}}
{{- end -}}
{{- if and (eq $o.tls.mode "files") (not .Values.certManager.enabled) (not $o.tls.existingSecret) -}}
{{- fail "operator.tls.mode is files but operator.tls.existingSecret is empty: name the Secret (tls.crt, tls.key, optional ca.crt) to serve, or enable certManager" -}}
{{- end -}}
{{- if and .Values.podDisruptionBudget.enabled (ge (int .Values.podDisruptionBudget.minAvailable) (int $o.replicas)) (gt (int $o.replicas) 0) -}}
{{- fail (printf "podDisruptionBudget.minAvailable (%d) must be less than operator.replicas (%d), or no node could ever be drained; lower it or disable the budget" (int .Values.podDisruptionBudget.minAvailable) (int $o.replicas)) -}}
{{- end -}}
{{- $managed := list "leader-elect" "api-bind-address" "tls-mode" "tls-cert-file" "tls-key-file" "tls-ca-file" "token-audiences" "metrics-bind-address" "health-probe-bind-address" "kube-api-qps" "kube-api-burst" "workers" "warm-refill-rate" "sync-image" "operator-pod-labels" "v" "leader-elect-lease-duration" "leader-elect-renew-deadline" "leader-elect-retry-period" "tracing-endpoint" "tracing-protocol" "tracing-sample-ratio" -}}
{{- range $o.extraArgs -}}
{{- $flag := regexReplaceAll "^--?([^=]+).*$" . "${1}" -}}
{{- if has $flag $managed -}}
{{- fail (printf "operator.extraArgs has %q: --%s is set by the chart from its own value (see values.yaml); set that value instead" . $flag) -}}
{{- end -}}
{{- end -}}
{{- range $o.extraArgs -}}
{{- if and $.Values.egress.enabled (eq (regexReplaceAll "^--?([^=]+).*$" . "${1}") "egress-gateway-service") -}}
{{- fail (printf "operator.extraArgs has %q: with egress.enabled the chart names its gateway itself" .) -}}
{{- end -}}
{{- end -}}
{{- range $o.extraArgs -}}
{{- if and $.Values.egress.enabled $.Values.egress.managedCA (has (regexReplaceAll "^--?([^=]+).*$" . "${1}") (list "egress-ca-bundle-configmap" "manage-egress-ca")) -}}
{{- fail (printf "operator.extraArgs has %q: with egress.managedCA the chart sets the operator's egress CA flags itself (set egress.managedCA=false to bring your own)" .) -}}
{{- end -}}
{{- end -}}
{{- range .Values.egress.extraArgs -}}
{{- if and $.Values.egress.managedCA (has (regexReplaceAll "^--?([^=]+).*$" . "${1}") (list "terminate-ca-dir" "terminate-ca-cert-file" "terminate-ca-key-file")) -}}
{{- fail (printf "egress.extraArgs has %q: with egress.managedCA the gateway uses the operator's CA (set egress.managedCA=false to bring your own)" .) -}}
{{- end -}}
{{- end -}}
{{- range .Values.egress.extraArgs -}}
{{- $flag := regexReplaceAll "^--?([^=]+).*$" . "${1}" -}}
{{- if has $flag (list "proxy-bind-address" "health-probe-bind-address" "metrics-bind-address" "decisions-bind-address") -}}
{{- fail (printf "egress.extraArgs has %q: --%s is set by the chart (its Service, probes and NetworkPolicy name that port)" . $flag) -}}
{{- end -}}
{{- if has $flag (list "tracing-endpoint" "tracing-protocol" "tracing-sample-ratio") -}}
{{- fail (printf "egress.extraArgs has %q: --%s is set by the chart from tracing.*; set that value instead" . $flag) -}}
{{- end -}}
{{- end -}}
{{- $tr := .Values.sandbox.toolRegistry -}}
{{- if and $tr.enabled (not $tr.namespace) -}}
{{- fail "sandbox.toolRegistry.enabled is true but sandbox.toolRegistry.namespace is empty: name the namespace of the AgentRuntimes that use it" -}}
{{- end -}}
{{- if and $tr.enabled (not .Values.sandbox.codegenClass.enabled) -}}
{{- fail "sandbox.toolRegistry.enabled is true but sandbox.codegenClass.enabled is false: the registry's codegen sandbox names that class" -}}
{{- end -}}
{{- if and $tr.enabled (gt (int $tr.warm) 0) (eq $tr.workspace "session") -}}
{{- fail "sandbox.toolRegistry.warm must be 0 with sandbox.toolRegistry.workspace session: warm members serve fresh workspaces only" -}}
{{- end -}}
{{- if and $tr.enabled $tr.warmPolicy (gt (int $tr.warm) 0) -}}
{{- fail "sandbox.toolRegistry.warm and sandbox.toolRegistry.warmPolicy are both set: a pool has a fixed count or follows demand, not both" -}}
{{- end -}}
{{- if and $tr.enabled $tr.warmPolicy (eq $tr.workspace "session") -}}
{{- fail "sandbox.toolRegistry.warmPolicy is set with sandbox.toolRegistry.workspace session: warm members serve fresh workspaces only" -}}
{{- end -}}
{{- if and .Values.sandbox.allowedTools (not $tr.enabled) -}}
{{- fail "sandbox.allowedTools is set but sandbox.toolRegistry.enabled is false: the allowlist belongs to the chart's ToolRegistry; enable it (or write your own registry)" -}}
{{- end -}}
{{- end }}

{{/* Labels of the egress gateway's objects (manifests/components/egress). */}}
{{- define "airlock.egressSelectorLabels" -}}
app.kubernetes.io/name: airlock
app.kubernetes.io/component: egress
{{- end }}

{{- define "airlock.egressLabels" -}}
{{ include "airlock.egressSelectorLabels" . }}
{{ include "airlock.helmLabels" . }}
{{- end }}

{{- define "airlock.recordsWebhookSelectorLabels" -}}
app.kubernetes.io/name: airlock
app.kubernetes.io/component: records-webhook
{{- end }}

{{/* Labels of the records webhook's objects. */}}
{{- define "airlock.recordsWebhookLabels" -}}
{{ include "airlock.recordsWebhookSelectorLabels" . }}
{{ include "airlock.helmLabels" . }}
{{- end }}
