{{/* The name of one component's objects: <release>-fedclust-<component>. */}}
{{- define "fedclust.name" -}}
{{- printf "%s-fedclust-%s" .root.Release.Name .component | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Labels of one component; the selector uses the last two. */}}
{{- define "fedclust.labels" -}}
app.kubernetes.io/part-of: fedclust
app.kubernetes.io/managed-by: {{ .root.Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .root.Chart.Name .root.Chart.Version }}
{{ include "fedclust.selector" . }}
{{- end -}}

{{- define "fedclust.selector" -}}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{/* The Secret holding a component's TOML: the existing one, or the chart's. */}}
{{- define "fedclust.secret" -}}
{{- if .values.existingSecret -}}
{{- .values.existingSecret -}}
{{- else -}}
{{- include "fedclust.name" . -}}
{{- end -}}
{{- end -}}

{{/* The container's security context: read-only root, no privileges. */}}
{{- define "fedclust.containerSecurity" -}}
readOnlyRootFilesystem: true
allowPrivilegeEscalation: false
capabilities:
  drop: ["ALL"]
{{- end -}}

{{/* The container's variables: FEDCLUST_SECRETS_DIR for `secretsDir`, then `env` verbatim. */}}
{{- define "fedclust.env" -}}
{{- if or .values.env .values.secretsDir -}}
env:
{{- if .values.secretsDir }}
  - {name: FEDCLUST_SECRETS_DIR, value: /run/secrets/fedclust}
{{- end }}
{{- with .values.env }}
{{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}
{{- end -}}
