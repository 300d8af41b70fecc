{{/* The gateway container, shared by the gateway Deployment and, with
gateway.colocated.enabled, each node pod (StatefulSet). */}}

{{/* berth.colocated: "true" when a gateway runs in each node pod. */}}
{{- define "berth.colocated" -}}
{{- if .Values.gateway.colocated.enabled -}}true{{- end -}}
{{- end -}}

{{/* berth.gatewayPods: the component whose pods run the gateways ("gateway",
or "node" when colocated); Services and NetworkPolicies select its pods. */}}
{{- define "berth.gatewayPods" -}}
{{- ternary "node" "gateway" (eq (include "berth.colocated" .) "true") -}}
{{- end -}}

{{/* berth.gatewayBehindLB: "true" when the devices' addresses are hidden
(no LoadBalancer of our own, or externalTrafficPolicy Cluster): no
per-source SYN filtering. */}}
{{- define "berth.gatewayBehindLB" -}}
{{- $g := .Values.gateway -}}
{{- or (eq $g.service.type "ClusterIP") (ne $g.service.externalTrafficPolicy "Local") -}}
{{- end -}}

{{/* Values of the gateway that only make sense together. */}}
{{- define "berth.gatewayCheck" -}}
{{- $g := .Values.gateway -}}
{{- if and $g.tls.enabled (not $g.tls.secretName) }}{{ fail "gateway.tls.secretName is required with gateway.tls.enabled" }}{{ end -}}
{{- if and $g.synFilter.enabled (or (eq (include "berth.gatewayBehindLB" .) "true") $g.proxyProtocolFrom) }}{{ fail "gateway.synFilter.enabled needs the devices' own addresses (service.type LoadBalancer or NodePort with externalTrafficPolicy Local, no proxyProtocolFrom): the filter would stay off, and CAP_BPF would be granted for nothing" }}{{ end -}}
{{- if and $g.colocated.enabled $g.synFilter.enabled }}{{ fail "gateway.synFilter.enabled and gateway.colocated.enabled exclude each other: the SYN filter runs the gateway as uid 0 with CAP_BPF alone, which cannot open the node's handoff socket (mode 0600, owned by the node's uid) and would make every node pod need the privileged Pod Security Standard" }}{{ end -}}
{{- if and $g.dns.enabled (or (not $g.dns.nameServers) (not $g.dns.fallback)) }}{{ fail "gateway.dns.nameServers and gateway.dns.fallback are required with gateway.dns.enabled: the zone's name servers (its delegation's NS names) and the address answered for a tenant whose leader has no public host (the gateway Service's)" }}{{ end -}}
{{- /* The API hands out <slug>.<domain> and the gateways check SNI
       against domain: a zone of another name would answer names no
       device is given. */}}
{{- if and $g.dns.zone (ne (lower (trimSuffix "." $g.dns.zone)) (lower (trimSuffix "." .Values.domain))) }}{{ fail (printf "gateway.dns.zone (%s) must be domain (%s) or empty: the API gives each tenant <slug>.<domain> and the gateways check the TLS server name against domain" $g.dns.zone .Values.domain) }}{{ end -}}
{{- if $g.dns.enabled }}
{{- /* The responder answers only <slug>.<zone> (the apex: SOA and NS):
       any other name in the zone would meet NXDOMAIN or NODATA, and a
       name server there would need glue it does not serve. */}}
{{- $zone := lower (trimSuffix "." (default .Values.domain $g.dns.zone)) }}
{{- $names := dict "gateway.colocated.publicDomain" (and $g.colocated.enabled $g.colocated.publicDomain) "gateway.dns.fallback" $g.dns.fallback "gateway.dns.acmeChallengeCNAME" $g.dns.acmeChallengeCNAME "mqttHost (default: domain)" (include "berth.mqttHost" $) }}
{{- range $i, $ns := $g.dns.nameServers }}{{ $_ := set $names (printf "gateway.dns.nameServers[%d]" $i) $ns }}{{ end }}
{{- range $what, $name := $names }}
{{- $n := lower (trimSuffix "." (toString $name)) }}
{{- if and $name (or (eq $n $zone) (hasSuffix (printf ".%s" $zone) $n)) }}{{ fail (printf "%s (%s) must lie outside the zone gateway.dns serves (%s): the gateways answer only <slug>.%s there" $what $name $zone $zone) }}{{ end }}
{{- end }}
{{- end -}}
{{- if and $g.colocated.enabled $g.colocated.perPodServices.enabled (not $g.colocated.publicDomain) }}{{ fail "gateway.colocated.publicDomain is required with gateway.colocated.perPodServices.enabled: each node pod is reached at <pod>.<publicDomain> (or set gateway.colocated.perPodServices.enabled=false)" }}{{ end -}}
{{- end -}}

{{/* berth.gatewayContainer: the gateway container. */}}
{{- define "berth.gatewayContainer" -}}
{{- $g := .Values.gateway -}}
- name: gateway
  image: {{ include "berth.image" (list . "berth-gateway") }}
  imagePullPolicy: {{ .Values.image.pullPolicy }}
  args:
    - -gateway-id=$(POD_NAME)
    - -listen=:1883
    - -listen-ws=:8083
    {{- if $g.tls.enabled }}
    - -listen-tls=:8883
    - -listen-wss=:8084
    - -tls-cert=/etc/berth/tls/tls.crt
    - -tls-key=/etc/berth/tls/tls.key
    {{- end }}
    - -metrics-listen=:9101
    - -tenant-domain={{ .Values.domain }}
    - -jwks-url={{ include "berth.jwksURL" . }}
    - -drain-grace={{ $g.drainGraceSeconds }}s
    - -trace-sample={{ $g.traceSample }}
    - -limit-fail-closed={{ $g.limitFailClosed }}
    - -syn-filter={{ $g.synFilter.enabled }}
    - -behind-load-balancer={{ include "berth.gatewayBehindLB" . }}
    {{- with $g.proxyProtocolFrom }}
    - -proxy-protocol-from={{ . }}
    {{- end }}
    {{- if include "berth.colocated" . }}
    # Plain-TCP devices of a tenant this pod's node leads are handed to it
    # over its socket here (/run/berth/<pod>.sock), not relayed.
    - -handoff-dir=/run/berth
    {{- end }}
    {{- with $g.dns }}{{ if .enabled }}
    # Authoritative DNS for <slug>.<zone>: each tenant's leader's pod
    # (its node's -public-host), else the fallback.
    - -dns-listen=:5353
    - -dns-zone={{ $.Values.domain }}
    - -dns-ttl={{ .ttl }}
    - -dns-ns={{ join "," .nameServers }}
    - -dns-fallback={{ .fallback }}
    {{- with .acmeChallengeCNAME }}
    # _acme-challenge.<zone>: the wildcard certificate's DNS-01 challenge,
    # solved in the zone this names.
    - -dns-acme-cname={{ . }}
    {{- end }}
    {{- end }}{{ end }}
    {{- include "berth.redisArgs" . | nindent 4 }}
    - -log-format={{ .Values.logFormat }}
    {{- range $g.extraArgs }}
    - {{ . | quote }}
    {{- end }}
  env:
    - name: POD_NAME
      valueFrom:
        fieldRef:
          fieldPath: metadata.name
    {{- include "berth.databaseEnv" . | nindent 4 }}
    {{- include "berth.redisEnv" . | nindent 4 }}
    {{- include "berth.secretEnv" (list "BERTH_PROXY_SECRET" .Values.secrets.proxySecret) | nindent 4 }}
    {{- include "berth.otlpEnv" . | nindent 4 }}
  ports:
    - name: mqtt
      containerPort: 1883
    - name: ws
      containerPort: 8083
    {{- if $g.tls.enabled }}
    - name: mqtts
      containerPort: 8883
    - name: wss
      containerPort: 8084
    {{- end }}
    - name: metrics
      containerPort: 9101
    {{- if $g.dns.enabled }}
    - name: dns-udp
      containerPort: 5353
      protocol: UDP
    - name: dns-tcp
      containerPort: 5353
      protocol: TCP
    {{- end }}
  # The listeners open once Postgres, Redis and the JWKS are wired;
  # on SIGTERM they close first, so readiness drops with them.
  startupProbe:
    tcpSocket: {port: mqtt}
    periodSeconds: 2
    failureThreshold: 60
  readinessProbe:
    tcpSocket: {port: mqtt}
    periodSeconds: 5
  livenessProbe:
    httpGet: {path: /metrics, port: metrics}
    periodSeconds: 10
    failureThreshold: 6
  lifecycle:
    # Keep serving while load balancers take the pod out, then the
    # SIGTERM drains: listeners close, live connections get
    # -drain-grace to finish, their connection leases are released.
    preStop:
      sleep: {seconds: {{ $g.preStopSleepSeconds }}}
  resources:
    {{- toYaml $g.resources | nindent 4 }}
  securityContext:
    {{- if $g.synFilter.enabled }}
    {{- /* The least the kernel needs to load the SYN filter: CAP_BPF.
           Kubernetes gives an added capability to uid 0 only. */}}
    {{- $bpf := dict "runAsUser" 0 "runAsNonRoot" false "capabilities" (dict "drop" (list "ALL") "add" (list "BPF")) }}
    {{- toYaml (merge $bpf (deepCopy .Values.securityContext)) | nindent 4 }}
    {{- else }}
    {{- toYaml .Values.securityContext | nindent 4 }}
    {{- end }}
  {{- if or $g.tls.enabled (include "berth.colocated" .) }}
  volumeMounts:
    {{- if $g.tls.enabled }}
    - name: tls
      mountPath: /etc/berth/tls
      readOnly: true
    {{- end }}
    {{- if include "berth.colocated" . }}
    - name: handoff
      mountPath: /run/berth
    {{- end }}
  {{- end }}
{{- end -}}

{{/* berth.gatewayTLSVolume: the TLS Secret's volume, with gateway.tls. */}}
{{- define "berth.gatewayTLSVolume" -}}
{{- if .Values.gateway.tls.enabled -}}
# A Secret volume is updated in place when the Secret changes
# (cert-manager renewals); the gateway reloads the files.
- name: tls
  secret:
    secretName: {{ .Values.gateway.tls.secretName }}
{{- end }}
{{- end -}}

{{/* berth.gatewayGrace: the seconds a gateway needs after it is marked for
deletion: its preStop pause, its drain, a margin. */}}
{{- define "berth.gatewayGrace" -}}
{{- $g := .Values.gateway -}}
{{- add $g.preStopSleepSeconds $g.drainGraceSeconds $g.terminationMarginSeconds -}}
{{- end -}}

{{/* berth.gatewayServicePorts: the devices' ports of a gateway Service. */}}
{{- define "berth.gatewayServicePorts" -}}
{{- $g := .Values.gateway -}}
- name: mqtt
  port: {{ $g.service.ports.mqtt }}
  targetPort: mqtt
{{- if $g.tls.enabled }}
- name: mqtts
  port: {{ $g.service.ports.mqtts }}
  targetPort: mqtts
- name: wss
  port: {{ $g.service.ports.websocket }}
  targetPort: wss
{{- else }}
- name: ws
  port: {{ $g.service.ports.websocket }}
  targetPort: ws
{{- end }}
{{- end -}}
