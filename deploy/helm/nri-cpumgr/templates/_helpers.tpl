{{/* the labels of every object (the selector uses only app.kubernetes.io/name) */}}
{{- define "nri-cpumgr.labels" -}}
app.kubernetes.io/name: nri-cpumgr
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end }}

{{/* the port of config.metricsAddress ("host:port" or ":port"): probes, containerPort */}}
{{- define "nri-cpumgr.metricsPort" -}}
{{- $addr := required "config.metricsAddress must be set: the probes use it" .Values.config.metricsAddress -}}
{{- $port := regexReplaceAll "^.*:" (toString $addr) "" -}}
{{- if not (regexMatch "^[0-9]+$" $port) -}}
{{- fail (printf "config.metricsAddress %q: expected host:port" $addr) -}}
{{- end -}}
{{- $port -}}
{{- end }}

{{/* the directory of config.socketPath: mounted from the host at the same path */}}
{{- define "nri-cpumgr.socketDir" -}}
{{- dir (required "config.socketPath must be set" .Values.config.socketPath) -}}
{{- end }}

{{- define "nri-cpumgr.stateDir" -}}
{{- required "config.stateDirectory must be set" .Values.config.stateDirectory -}}
{{- end }}
