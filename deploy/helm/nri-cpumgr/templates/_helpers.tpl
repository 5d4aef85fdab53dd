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
{{- if or (not (regexMatch "^[0-9]+$" $port)) (not (contains ":" (toString $addr))) -}}
{{- fail (printf "config.metricsAddress %q: expected host:port, e.g. \":9109\" (a string: --set config.metricsAddress=:9109)" (toString $addr)) -}}
{{- end -}}
{{- $port -}}
{{- end }}

{{/* the directory of config.socketPath: mounted from the host at the same path (absolute,
as the plugin requires: a hostPath volume has no working directory) */}}
{{- define "nri-cpumgr.socketDir" -}}
{{- $path := toString (required "config.socketPath must be set" .Values.config.socketPath) -}}
{{- if not (hasPrefix "/" $path) -}}
{{- fail (printf "config.socketPath %q: expected an absolute path (the runtime's NRI socket, e.g. /var/run/nri/nri.sock)" $path) -}}
{{- end -}}
{{- dir $path -}}
{{- end }}

{{/* config.stateDirectory: mounted from the host at the same path (absolute, as above) */}}
{{- define "nri-cpumgr.stateDir" -}}
{{- $path := toString (required "config.stateDirectory must be set" .Values.config.stateDirectory) -}}
{{- if not (hasPrefix "/" $path) -}}
{{- fail (printf "config.stateDirectory %q: expected an absolute path (the plugin's state directory, e.g. /var/lib/nri-cpumgr)" $path) -}}
{{- end -}}
{{- $path -}}
{{- end }}
