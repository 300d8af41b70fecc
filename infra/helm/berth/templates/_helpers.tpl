{{/* Names, labels, images and the environment every process shares. */}}

{{- define "berth.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 40 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 40 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{/* berth.name: the full name of one component; call with (list $ "node"). */}}
{{- define "berth.name" -}}
{{- printf "%s-%s" (include "berth.fullname" (index . 0)) (index . 1) -}}
{{- end -}}

{{/* Selector labels of one component; call with (list $ "node"). */}}
{{- define "berth.selectorLabels" -}}
app.kubernetes.io/name: berth
app.kubernetes.io/instance: {{ (index . 0).Release.Name }}
app.kubernetes.io/component: {{ index . 1 }}
{{- end -}}

{{/* All labels of one component's objects; call with (list $ "node"). */}}
{{- define "berth.labels" -}}
{{ include "berth.selectorLabels" . }}
app.kubernetes.io/version: {{ (index . 0).Values.image.tag | quote }}
app.kubernetes.io/part-of: berth
app.kubernetes.io/managed-by: {{ (index . 0).Release.Service }}
helm.sh/chart: {{ printf "%s-%s" (index . 0).Chart.Name (index . 0).Chart.Version }}
{{- end -}}

{{/* berth.image: one of Berth's images; call with (list $ "berth-node"). */}}
{{- define "berth.image" -}}
{{- $root := index . 0 -}}
{{- $tag := required "image.tag is required: the Berth release to run, e.g. --set image.tag=0.1.0" $root.Values.image.tag -}}
{{- if eq $tag "latest" }}{{ fail "image.tag: latest is refused, name the release to run" }}{{ end -}}
{{- with $root.Values.image.registry -}}{{ trimSuffix "/" . }}/{{- end -}}{{ index . 1 }}:{{ $tag }}
{{- end -}}

{{- define "berth.mqttHost" -}}
{{- default .Values.domain .Values.mqttHost -}}
{{- end -}}

{{/* The nodes' headless Service, also their DNS subdomain. */}}
{{- define "berth.nodeHeadless" -}}
{{- include "berth.name" (list . "node") -}}
{{- end -}}

{{/* berth.replicated: "true" when the nodes replicate (node.replication). */}}
{{- define "berth.replicated" -}}
{{- if and .Values.node.replication.enabled (ge (int .Values.node.replicas) 3) -}}true{{- end -}}
{{- end -}}

{{/* berth.nodePeers: -peers for every node, every pod by its stable DNS
name (a node skips its own entry). */}}
{{- define "berth.nodePeers" -}}
{{- $sts := include "berth.name" (list . "node") -}}
{{- $dns := printf "%s.%s.svc.%s" (include "berth.nodeHeadless" .) .Release.Namespace .Values.clusterDomain -}}
{{- $peers := list -}}
{{- range $i := until (int .Values.node.replicas) -}}
{{- $peers = append $peers (printf "%s-%d=%s-%d.%s:7881" $sts $i $sts $i $dns) -}}
{{- end -}}
{{- join "," $peers -}}
{{- end -}}

{{- define "berth.jwksURL" -}}
http://{{ include "berth.name" (list . "api") }}.{{ .Release.Namespace }}.svc.{{ .Values.clusterDomain }}:{{ .Values.api.service.port }}/v1/.well-known/jwks.json
{{- end -}}

{{/* berth.secretEnv: an environment variable from a Secret; call with (list "NAME" ref). */}}
{{- define "berth.secretEnv" -}}
- name: {{ index . 0 }}
  valueFrom:
    secretKeyRef:
      name: {{ required (printf "a Secret name for %s is required" (index . 0)) (index . 1).name }}
      key: {{ required (printf "a Secret key for %s is required" (index . 0)) (index . 1).key }}
{{- end -}}

{{/* DATABASE_URL: from its Secret, or the bundled Postgres' address with the
password from its Secret (expanded by Kubernetes, never written here). */}}
{{- define "berth.databaseEnv" -}}
{{- if .Values.database.bundled.enabled }}
{{ include "berth.secretEnv" (list "BERTH_BUNDLED_POSTGRES_PASSWORD" .Values.database.bundled.passwordSecret) }}
- name: DATABASE_URL
  value: "postgres://berth:$(BERTH_BUNDLED_POSTGRES_PASSWORD)@{{ include "berth.name" (list . "postgres") }}:5432/berth?sslmode=disable"
{{- else }}
{{ include "berth.secretEnv" (list "DATABASE_URL" .Values.database.urlSecret) }}
{{- end }}
{{- end -}}

{{/* The gateway's Redis: REDIS_URL (url mode, or the bundled server), or
the Sentinel/Cluster passwords; every secret from its Secret. */}}
{{- define "berth.redisEnv" -}}
{{- $r := .Values.redis -}}
{{- include "berth.redisCheck" . -}}
{{- if $r.bundled.enabled }}
{{ include "berth.secretEnv" (list "BERTH_BUNDLED_REDIS_PASSWORD" $r.bundled.passwordSecret) }}
- name: REDIS_URL
  value: "redis://:$(BERTH_BUNDLED_REDIS_PASSWORD)@{{ include "berth.name" (list . "redis") }}:6379/0"
{{- else if eq $r.mode "url" }}
{{ include "berth.secretEnv" (list "REDIS_URL" $r.urlSecret) }}
{{- else }}
{{- with $r.passwordSecret }}
{{ include "berth.secretEnv" (list "BERTH_REDIS_PASSWORD" .) }}
{{- end }}
{{- with $r.sentinelPasswordSecret }}
{{ include "berth.secretEnv" (list "BERTH_REDIS_SENTINEL_PASSWORD" .) }}
{{- end }}
{{- end }}
{{- end -}}

{{/* The gateway's Redis topology flags (sentinel and cluster modes). */}}
{{- define "berth.redisArgs" -}}
{{- $r := .Values.redis -}}
{{- if and (not $r.bundled.enabled) (ne $r.mode "url") }}
{{- if eq $r.mode "sentinel" }}
- -redis-sentinel-master={{ $r.masterName }}
{{- else }}
- -redis-cluster
{{- end }}
- -redis-addrs={{ join "," $r.addrs }}
{{- with $r.username }}
- -redis-username={{ . }}
{{- end }}
{{- if $r.tls }}
- -redis-tls
{{- end }}
{{- end }}
{{- end -}}

{{/* Values that only make sense together. */}}
{{- define "berth.redisCheck" -}}
{{- $r := .Values.redis -}}
{{- if and $r.bundled.enabled (ne $r.mode "url") }}
{{- fail "redis.bundled.enabled needs redis.mode=url (the bundled Redis is one server)" }}
{{- end }}
{{- if and (eq $r.mode "sentinel") (not $r.masterName) }}
{{- fail "redis.masterName is required with redis.mode=sentinel" }}
{{- end }}
{{- if and (ne $r.mode "url") (not $r.addrs) }}
{{- fail (printf "redis.addrs is required with redis.mode=%s" $r.mode) }}
{{- end }}
{{- if and (eq $r.mode "url") (or $r.addrs $r.masterName $r.passwordSecret $r.sentinelPasswordSecret) }}
{{- fail "redis.addrs, masterName and the password Secrets are for redis.mode=sentinel or cluster; in url mode the URL carries the password" }}
{{- end }}
{{- if and (eq $r.mode "cluster") (or $r.masterName $r.sentinelPasswordSecret) }}
{{- fail "redis.masterName and sentinelPasswordSecret are for redis.mode=sentinel" }}
{{- end }}
{{- end -}}

{{- define "berth.otlpEnv" -}}
{{- with .Values.otlpEndpoint }}
- name: OTEL_EXPORTER_OTLP_ENDPOINT
  value: {{ . | quote }}
{{- end }}
{{- end -}}

{{- define "berth.stripeEnv" -}}
{{- if .Values.secrets.stripe.enabled }}
{{ include "berth.secretEnv" (list "BERTH_STRIPE_KEY" .Values.secrets.stripe.apiKey) }}
{{- end }}
{{- end -}}

{{/* The pod-level fields every Berth pod shares; call with (list $ .Values.<component>). */}}
{{- define "berth.podCommon" -}}
{{- $root := index . 0 -}}
{{- $c := index . 1 -}}
securityContext:
  {{- toYaml $root.Values.podSecurityContext | nindent 2 }}
automountServiceAccountToken: false
enableServiceLinks: false
{{- with $root.Values.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with $c.nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with $c.tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with $c.affinity }}
affinity:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}
