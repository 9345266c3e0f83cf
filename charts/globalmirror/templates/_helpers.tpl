{{/* Names. Object names are capped at 63 characters: Service names are DNS labels. */}}
{{- define "globalmirror.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "globalmirror.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "globalmirror.controller.fullname" -}}
{{- printf "%s-controller" (include "globalmirror.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "globalmirror.coredns.fullname" -}}
{{- printf "%s-coredns" (include "globalmirror.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "globalmirror.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Labels. Call with (dict "ctx" $ "component" "controller"). */}}
{{- define "globalmirror.selectorLabels" -}}
app.kubernetes.io/name: {{ include "globalmirror.name" .ctx }}
app.kubernetes.io/instance: {{ .ctx.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end }}

{{- define "globalmirror.labels" -}}
helm.sh/chart: {{ include "globalmirror.chart" .ctx }}
{{ include "globalmirror.selectorLabels" . }}
app.kubernetes.io/version: {{ .ctx.Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .ctx.Release.Service }}
app.kubernetes.io/part-of: globalmirror
{{- with .ctx.Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/* The labels kube-dns and coredns carry, which the kube-dns Service selects on. */}}
{{- define "globalmirror.coredns.clusterServiceLabels" -}}
{{- if .Values.coredns.isClusterService }}
k8s-app: {{ .Values.coredns.k8sAppLabel }}
kubernetes.io/cluster-service: "true"
kubernetes.io/name: CoreDNS
{{- end }}
{{- end }}

{{- define "globalmirror.coredns.labels" -}}
{{ include "globalmirror.labels" (dict "ctx" . "component" "coredns") }}
{{- include "globalmirror.coredns.clusterServiceLabels" . }}
{{- end }}

{{- define "globalmirror.coredns.selectorLabels" -}}
{{ include "globalmirror.selectorLabels" (dict "ctx" . "component" "coredns") }}
{{- if .Values.coredns.isClusterService }}
k8s-app: {{ .Values.coredns.k8sAppLabel }}
{{- end }}
{{- end }}

{{/* ServiceAccounts. */}}
{{- define "globalmirror.controller.serviceAccountName" -}}
{{- if .Values.controller.serviceAccount.create }}
{{- default (include "globalmirror.controller.fullname" .) .Values.controller.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.controller.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "globalmirror.coredns.serviceAccountName" -}}
{{- if .Values.coredns.serviceAccount.create }}
{{- default (include "globalmirror.coredns.fullname" .) .Values.coredns.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.coredns.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* An image reference: by digest when one is given, else by tag (default appVersion). Call with (dict "ctx" $ "image" .Values.x.image). */}}
{{- define "globalmirror.image" -}}
{{- if .image.digest }}
{{- printf "%s@%s" .image.repository .image.digest }}
{{- else }}
{{- printf "%s:%s" .image.repository (default .ctx.Chart.AppVersion .image.tag) }}
{{- end }}
{{- end }}

{{- define "globalmirror.controller.leaseName" -}}
{{- default (include "globalmirror.controller.fullname" .) .Values.controller.leaderElection.leaseName }}
{{- end }}

{{/* The options the chart appends to every `global` stanza so that the plugin and the controller agree. */}}
{{- define "globalmirror.coredns.globalOptions" -}}
suffix {{ .Values.suffix }}
local_selector {{ .Values.localSelector }}
{{- with .Values.controller.namespaces }}
namespaces {{ join " " . }}
{{- end }}
{{- end }}

{{/*
The server blocks the chart's CoreDNS runs: coredns.servers, or with
coredns.forwarded one block of the clusterset zone alone, which the cluster
DNS forwards to it. It answers only what global holds there (no kubernetes,
no forward): the cluster DNS keeps every other name, and no query loops
back through it. No cache: global answers from memory, and a cache would
only hold a drained or healed answer past its change.
*/}}
{{- define "globalmirror.coredns.servers" -}}
{{- $f := .Values.coredns.forwarded }}
{{- if $f.enabled }}
{{- if not $f.clusterID }}{{ fail "coredns.forwarded.clusterID is required: this cluster's name in per-pod names (db-0.<clusterID>.db.<ns>.svc.clusterset.local)" }}{{ end }}
{{- if .Values.coredns.isClusterService }}{{ fail "coredns.forwarded and coredns.isClusterService exclude each other: a forwarded zone's DNS is not the cluster DNS" }}{{ end }}
- zones:
    - zone: {{ $f.zone }}
  port: 53
  plugins:
    - name: errors
    - name: health
      configBlock: lameduck 15s
    - name: ready
    - name: global
      parameters: cluster.local
      configBlock: |-
        clusterset {{ $f.clusterID }} {{ $f.zone }}
        ttl {{ $f.ttl }}
    - name: prometheus
      parameters: 0.0.0.0:9153
    - name: reload
    - name: loadbalance
{{- else }}
{{- toYaml .Values.coredns.servers }}
{{- end }}
{{- end }}

{{/* The Corefile, from the server blocks. */}}
{{- define "globalmirror.coredns.corefile" -}}
{{- $root := . }}
{{- range $i, $server := include "globalmirror.coredns.servers" . | fromYamlArray }}
{{- if $i }}{{ "\n" }}{{ end }}
{{- $zones := list }}
{{- range $server.zones }}{{ $zones = append $zones (default "." .zone) }}{{ end }}
{{- if not $zones }}{{ $zones = list "." }}{{ end }}
{{- range $j, $z := $zones }}{{ if $j }} {{ end }}{{ $z }}{{ if $server.port }}:{{ $server.port }}{{ end }}{{ end }} {
{{- range $server.plugins }}
{{- if eq .name "global" }}
    global{{ with .parameters }} {{ . }}{{ end }} {
{{- include "globalmirror.coredns.globalOptions" $root | nindent 8 }}
{{- with .configBlock }}
{{- . | nindent 8 }}
{{- end }}
    }
{{- else }}
    {{ .name }}{{ with .parameters }} {{ . }}{{ end }}{{ with .configBlock }} {
{{- . | nindent 8 }}
    }{{ end }}
{{- end }}
{{- end }}
}
{{- end }}
{{- end }}

{{/* The DNS ports of all servers, deduplicated. */}}
{{- define "globalmirror.coredns.dnsPorts" -}}
{{- $ports := list }}
{{- range include "globalmirror.coredns.servers" . | fromYamlArray }}{{ $ports = append $ports (int (default 53 .port)) }}{{ end }}
{{- $ports | uniq | sortAlpha | join "," }}
{{- end }}

{{/* The port of the first prometheus plugin; 9153 when none names one. */}}
{{- define "globalmirror.coredns.metricsPort" -}}
{{- $port := "" }}
{{- range include "globalmirror.coredns.servers" . | fromYamlArray }}
{{- range .plugins }}
{{- if and (eq .name "prometheus") (not $port) }}
{{- $port = default "9153" (regexFind "[0-9]+$" (toString (default "" .parameters))) }}
{{- end }}
{{- end }}
{{- end }}
{{- default "9153" $port }}
{{- end }}

{{/*
What the controller does with the API in the namespaces it watches, and
nothing more: it watches Services and EndpointSlices, writes the global ones
it owns, and reports collisions as Events (client-go's recorder creates and patches core/v1 Events; events.k8s.io
is the same resource through the newer API).
*/}}
{{- define "globalmirror.controller.rules" -}}
- apiGroups: [""]
  resources: ["services"]
  verbs: ["get", "list", "watch", "create", "update", "patch", "delete"]
- apiGroups: ["discovery.k8s.io"]
  resources: ["endpointslices"]
  verbs: ["get", "list", "watch", "create", "update", "patch", "delete"]
- apiGroups: [""]
  resources: ["events"]
  verbs: ["create", "patch"]
- apiGroups: ["events.k8s.io"]
  resources: ["events"]
  verbs: ["create", "patch"]
{{- end }}

{{/*
The Links' metadata, read cluster-wide whatever namespaces the controller
watches: a Link lives where Linkerd's multicluster extension is installed,
and its drain annotation drains that cluster in every namespace.
*/}}
{{- define "globalmirror.links.rules" -}}
- apiGroups: ["multicluster.linkerd.io"]
  resources: ["links"]
  verbs: ["list", "watch"]
{{- end }}

{{/*
The pod's API token, where serviceAccount.tokenExpirationSeconds asks for
one of its own lifetime: the kubelet's default token volume, but that its
token expires then (the kubelet renews it at 80% of that), for clusters
whose policy bounds token lifetimes. Both components read the file again
as it is renewed. Call with (dict "sa" <serviceAccount values>) and put
"volumes" and "volumeMounts" where each goes.
*/}}
{{- define "globalmirror.tokenVolume" -}}
- name: kube-api-access
  projected:
    defaultMode: 420
    sources:
      - serviceAccountToken:
          expirationSeconds: {{ .sa.tokenExpirationSeconds }}
          path: token
      - configMap:
          name: kube-root-ca.crt
          items:
            - key: ca.crt
              path: ca.crt
      - downwardAPI:
          items:
            - path: namespace
              fieldRef:
                apiVersion: v1
                fieldPath: metadata.namespace
{{- end }}

{{- define "globalmirror.tokenMount" -}}
- name: kube-api-access
  mountPath: /var/run/secrets/kubernetes.io/serviceaccount
  readOnly: true
{{- end }}
