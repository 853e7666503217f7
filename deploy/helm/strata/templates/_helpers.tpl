{{/* Names and labels. */}}
{{- define "strata.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "strata.fullname" -}}
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

{{- define "strata.selectorLabels" -}}
app.kubernetes.io/name: {{ include "strata.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "strata.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "strata.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{- define "strata.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "strata.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "strata.image" -}}
{{- $tag := .Values.image.tag | default (printf "%s%s" .Chart.AppVersion (ternary "" "-cpu" (gt (int .Values.gpu.count) 0))) }}
{{- printf "%s:%s" .Values.image.repository $tag }}
{{- end }}

{{- define "strata.modelClaimName" -}}
{{- .Values.model.pvc.claimName | default (printf "%s-models" (include "strata.fullname" .)) }}
{{- end }}

{{/* The claim holding --files-dir (batchFiles.persistence). */}}
{{- define "strata.batchFilesClaimName" -}}
{{- .Values.batchFiles.pvc.claimName | default (printf "%s-batch-files" (include "strata.fullname" .)) }}
{{- end }}

{{/* The claim holding --kv-offload-dir (kvOffload.volume.type pvc). */}}
{{- define "strata.kvOffloadClaimName" -}}
{{- .Values.kvOffload.volume.pvc.claimName | default (printf "%s-kv-offload" (include "strata.fullname" .)) }}
{{- end }}

{{/* Whether the disk tier is on (a volume mounted at kvOffload.dir). */}}
{{- define "strata.kvOffloadDisk" -}}
{{- if and .Values.kvOffload.enabled .Values.kvOffload.dir }}true{{ end }}
{{- end }}

{{/*
The KV offload tiers' flags (docs/kv-offload.md), after checking what `strata serve` would
refuse at start: sizes in its units (64GiB, not Kubernetes' 64Gi), one server per directory.
A process's engine ranks (one per GPU) share its tiers; the sizes are the process's.
*/}}
{{- define "strata.kvOffloadArgs" -}}
{{- $o := .Values.kvOffload }}
{{- if not (or $o.memory $o.dir) }}
{{- fail "kvOffload.enabled needs a tier: kvOffload.memory (host memory) or kvOffload.dir (disk)" }}
{{- end }}
{{- range $key := list "memory" "disk" }}
{{- $size := get $o $key | toString }}
{{- if and (get $o $key) (not (regexMatch `^[0-9]+(\.[0-9]+)?([kKmMgG]([iI]?[bB])?)?$` $size)) }}
{{- fail (printf "kvOffload.%s must be a size like 512MiB or 64GiB (strata serve's units, not Kubernetes' 64Gi), not %q" $key $size) }}
{{- end }}
{{- end }}
{{- with $o.memory }}
- --kv-offload-memory={{ . }}
{{- end }}
{{- if $o.dir }}
{{- if and (eq $o.volume.type "emptyDir") $o.volume.emptyDir.sizeLimit (not $o.disk) }}
{{- fail "kvOffload.disk is required with kvOffload.volume.emptyDir.sizeLimit: the server's default (64GiB or half the node disk's free space) can pass the limit, and kubelet evicts a pod past it" }}
{{- end }}
{{- if and (eq $o.volume.type "pvc") (or (eq .Values.mode "multi") (ne (int .Values.replicaCount) 1) .Values.autoscaling.enabled) }}
{{- fail "kvOffload.volume.type pvc needs one server: mode single, replicaCount 1, autoscaling off (one server per --kv-offload-dir); use emptyDir or hostPath for more" }}
{{- end }}
- --kv-offload-dir={{ $o.dir }}
{{- with $o.disk }}
- --kv-offload-disk={{ . }}
{{- end }}
{{- else if $o.disk }}
{{- fail "kvOffload.disk sizes the disk tier: it needs kvOffload.dir" }}
{{- end }}
{{- end }}

{{/*
`strata serve` arguments (its flags: `strata serve --help`). gRPC listens on 50051 by default,
so --grpc-port is passed only for another port. Multi-node pods add the rank flags: the process
rank is the pod's index in its LeaderWorkerSet group and the world is the group (one process
per node; with GPUs each process runs one rank per local GPU: --local-ranks gpu.count, world
size groupSize × gpu.count; without, one CPU rank per pod). Kubernetes expands $(VAR)
from the container's env, where the LeaderWorkerSet controller puts LWS_*.
*/}}
{{- define "strata.args" -}}
- serve
- --model={{ required "model.path is required" .Values.model.path }}
- --served-model-name={{ required "model.servedName is required" .Values.model.servedName }}
- --host=0.0.0.0
- --port={{ .Values.server.httpPort }}
{{- if ne (int .Values.server.grpcPort) 50051 }}
- --grpc-port={{ .Values.server.grpcPort }}
{{- end }}
- --log-level={{ .Values.server.logLevel }}
{{- if ne .Values.server.kvCacheDtype "auto" }}
- --kv-cache-dtype={{ .Values.server.kvCacheDtype }}
{{- end }}
{{- with .Values.server.quantization }}
- --quantization={{ . }}
{{- end }}
{{- with .Values.server.speculativeConfig }}
- {{ printf "--speculative-config=%s" (kindIs "string" . | ternary . (toJson .)) | quote }}
{{- end }}
{{- if .Values.server.jsonLogs }}
- --log-format=json
{{- end }}
{{- $gpus := int .Values.gpu.count }}
{{- $tp := int .Values.parallelism.tensorParallelSize }}
{{- $dcp := int .Values.parallelism.decodeContextParallelSize }}
{{- if or (lt $tp 1) (lt $dcp 1) (ne (mod $tp $dcp) 0) }}
{{- fail (printf "parallelism: decodeContextParallelSize %d must divide tensorParallelSize %d (both at least 1)" $dcp $tp) }}
{{- end }}
{{- if and (gt $gpus 0) (gt $tp $gpus) }}
{{- $group := int .Values.multiNode.groupSize }}
{{- if or (ne .Values.mode "multi") (ne $tp (mul $group $gpus)) }}
{{- fail (printf "parallelism.tensorParallelSize %d is above gpu.count %d: a tensor-parallel group across pods needs mode multi with multiNode.groupSize x gpu.count = %d (one group per LeaderWorkerSet group; replicaCount for more)" $tp $gpus $tp) }}
{{- end }}
{{- else if and (gt $gpus 0) (ne (mod $gpus $tp) 0) }}
{{- fail (printf "parallelism.tensorParallelSize %d must divide gpu.count %d: a pod runs whole tensor-parallel groups" $tp $gpus) }}
{{- end }}
{{- if and (eq .Values.mode "multi") (eq $gpus 0) (gt $tp 1) }}
{{- fail "parallelism.tensorParallelSize above 1 in multi mode needs GPUs (gpu.count): a CPU pod runs one rank" }}
{{- end }}
{{- if and (ne .Values.mode "multi") (gt $gpus 0) }}
- --device=cuda
{{- if gt $tp 1 }}
- --tensor-parallel-size={{ $tp }}
{{- if gt (div $gpus $tp) 1 }}
- --data-parallel-size={{ div $gpus $tp }}
{{- end }}
{{- else }}
- --replicas={{ .Values.gpu.count }}
{{- end }}
{{- else if and (ne .Values.mode "multi") (gt $tp 1) }}
- --tensor-parallel-size={{ $tp }}
{{- end }}
{{- if and (eq .Values.mode "multi") (gt (int .Values.gpu.count) 0) }}
- --device=cuda
{{- if gt $tp 1 }}
- --tensor-parallel-size={{ $tp }}
{{- end }}
- --local-ranks={{ .Values.gpu.count }}
- --num-nodes=$(LWS_GROUP_SIZE)
- --node-rank=$(LWS_WORKER_INDEX)
- --coordinator=$(LWS_LEADER_ADDRESS):{{ .Values.multiNode.coordinatorPort }}
{{- else if eq .Values.mode "multi" }}
- --world-size=$(LWS_GROUP_SIZE)
- --rank=$(LWS_WORKER_INDEX)
- --coordinator=$(LWS_LEADER_ADDRESS):{{ .Values.multiNode.coordinatorPort }}
{{- end }}
{{- if gt $dcp 1 }}
- --decode-context-parallel-size={{ $dcp }}
{{- end }}
{{- if .Values.batchFiles.persistence }}
- --files-dir={{ .Values.batchFiles.mountPath }}
{{- if .Values.batchFiles.keepResponses }}
- --responses-dir={{ .Values.batchFiles.mountPath }}/responses
{{- end }}
{{- else if .Values.batchFiles.keepResponses }}
{{- fail "batchFiles.keepResponses keeps stored responses on the batchFiles volume: it needs batchFiles.persistence" }}
{{- end }}
{{- if .Values.kvOffload.enabled }}
{{- include "strata.kvOffloadArgs" . }}
{{- end }}
{{- range .Values.server.extraArgs }}
- {{ . | quote }}
{{- end }}
{{- end }}

{{/*
Non-empty when one tensor-parallel group spans the pods of a LeaderWorkerSet group
(parallelism.tensorParallelSize above gpu.count: TP16 over two 8-GPU nodes). Then only the
leader's process answers requests (its rank 0 leads the group); the workers' processes compute
only and open no HTTP port, so they get no probes and the Service selects leaders only.
*/}}
{{- define "strata.tensorParallelAcrossPods" -}}
{{- if and (eq .Values.mode "multi") (gt (int .Values.gpu.count) 0) (gt (int .Values.parallelism.tensorParallelSize) (int .Values.gpu.count)) -}}
true
{{- end -}}
{{- end }}

{{/* The server container, shared by the Deployment and both LeaderWorkerSet templates (the
LeaderWorkerSet passes strataRole: leader or worker). */}}
{{- define "strata.container" -}}
- name: strata
  image: {{ include "strata.image" . | quote }}
  imagePullPolicy: {{ .Values.image.pullPolicy }}
  args:
    {{- include "strata.args" . | nindent 4 }}
  ports:
    - name: http
      containerPort: {{ .Values.server.httpPort }}
      protocol: TCP
    - name: grpc
      containerPort: {{ .Values.server.grpcPort }}
      protocol: TCP
    {{- if eq .Values.mode "multi" }}
    - name: coordinator
      containerPort: {{ .Values.multiNode.coordinatorPort }}
      protocol: TCP
    {{- end }}
  env:
    - name: STRATA_MODEL_NAME
      value: {{ .Values.model.servedName | quote }}
    {{- if .Values.server.apiKeySecret.name }}
    - name: STRATA_API_KEY
      valueFrom:
        secretKeyRef:
          name: {{ .Values.server.apiKeySecret.name }}
          key: {{ .Values.server.apiKeySecret.key }}
    {{- end }}
    {{- range $key, $value := .Values.nccl }}
    {{- if ne (toString $value) "" }}
    - name: NCCL_{{ $key }}
      value: {{ $value | toString | quote }}
    {{- end }}
    {{- end }}
    {{- with .Values.extraEnv }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
  {{- if not (and (eq (toString .strataRole) "worker") (include "strata.tensorParallelAcrossPods" .)) }}
  startupProbe:
    httpGet:
      path: {{ .Values.probes.startup.path }}
      port: http
    periodSeconds: {{ .Values.probes.startup.periodSeconds }}
    timeoutSeconds: {{ .Values.probes.startup.timeoutSeconds }}
    failureThreshold: {{ .Values.probes.startup.failureThreshold }}
  readinessProbe:
    {{- if eq .Values.probes.readiness.type "grpc" }}
    grpc:
      port: {{ .Values.server.grpcPort }}
      service: {{ .Values.probes.readiness.grpcService | quote }}
    {{- else }}
    httpGet:
      path: {{ .Values.probes.readiness.path }}
      port: http
    {{- end }}
    periodSeconds: {{ .Values.probes.readiness.periodSeconds }}
    timeoutSeconds: {{ .Values.probes.readiness.timeoutSeconds }}
    failureThreshold: {{ .Values.probes.readiness.failureThreshold }}
  livenessProbe:
    httpGet:
      path: {{ .Values.probes.liveness.path }}
      port: http
    periodSeconds: {{ .Values.probes.liveness.periodSeconds }}
    timeoutSeconds: {{ .Values.probes.liveness.timeoutSeconds }}
    failureThreshold: {{ .Values.probes.liveness.failureThreshold }}
  {{- end }}
  resources:
    {{- $resources := deepCopy .Values.resources }}
    {{- if gt (int .Values.gpu.count) 0 }}
    {{- $limits := get $resources "limits" | default dict }}
    {{- $_ := set $limits .Values.gpu.resourceName (int .Values.gpu.count) }}
    {{- $_ := set $resources "limits" $limits }}
    {{- $requests := get $resources "requests" | default dict }}
    {{- $_ := set $requests .Values.gpu.resourceName (int .Values.gpu.count) }}
    {{- $_ := set $resources "requests" $requests }}
    {{- end }}
    {{- toYaml $resources | nindent 4 }}
  {{- with .Values.securityContext }}
  securityContext:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  volumeMounts:
    {{- if ne .Values.model.source "none" }}
    - name: models
      mountPath: {{ .Values.model.mountPath }}
      readOnly: {{ .Values.model.readOnly }}
    {{- end }}
    {{- if .Values.shm.enabled }}
    - name: dshm
      mountPath: /dev/shm
    {{- end }}
    {{- if .Values.batchFiles.persistence }}
    - name: batch-files
      mountPath: {{ .Values.batchFiles.mountPath }}
    {{- end }}
    {{- if include "strata.kvOffloadDisk" . }}
    - name: kv-offload
      mountPath: {{ .Values.kvOffload.dir }}
    {{- end }}
{{- end }}

{{/* Pod spec (without metadata) shared by every workload kind. */}}
{{- define "strata.podSpec" -}}
serviceAccountName: {{ include "strata.serviceAccountName" . }}
{{- with .Values.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
terminationGracePeriodSeconds: {{ .Values.terminationGracePeriodSeconds }}
{{- with .Values.priorityClassName }}
priorityClassName: {{ . }}
{{- end }}
{{- with .Values.podSecurityContext }}
securityContext:
  {{- toYaml . | nindent 2 }}
{{- end }}
containers:
  {{- include "strata.container" . | nindent 2 }}
volumes:
  {{- if eq .Values.model.source "pvc" }}
  - name: models
    persistentVolumeClaim:
      claimName: {{ include "strata.modelClaimName" . }}
      readOnly: {{ .Values.model.readOnly }}
  {{- else if eq .Values.model.source "hostPath" }}
  - name: models
    hostPath:
      path: {{ .Values.model.hostPath.path }}
      type: {{ .Values.model.hostPath.type }}
  {{- else if ne .Values.model.source "none" }}
  {{- fail (printf "model.source must be pvc, hostPath or none, not %q" .Values.model.source) }}
  {{- end }}
  {{- if .Values.shm.enabled }}
  - name: dshm
    emptyDir:
      medium: Memory
      sizeLimit: {{ .Values.shm.sizeLimit }}
  {{- end }}
  {{- if .Values.batchFiles.persistence }}
  {{- if or (eq .Values.mode "multi") (ne (int .Values.replicaCount) 1) .Values.autoscaling.enabled }}
  {{- fail "batchFiles.persistence needs one server: mode single, replicaCount 1, autoscaling off (one server per --files-dir)" }}
  {{- end }}
  - name: batch-files
    persistentVolumeClaim:
      claimName: {{ include "strata.batchFilesClaimName" . }}
  {{- end }}
  {{- if include "strata.kvOffloadDisk" . }}
  {{- $v := .Values.kvOffload.volume }}
  - name: kv-offload
  {{- if eq $v.type "emptyDir" }}
    {{- if $v.emptyDir.sizeLimit }}
    emptyDir:
      sizeLimit: {{ $v.emptyDir.sizeLimit }}
    {{- else }}
    emptyDir: {}
    {{- end }}
  {{- else if eq $v.type "pvc" }}
    persistentVolumeClaim:
      claimName: {{ include "strata.kvOffloadClaimName" . }}
  {{- else if eq $v.type "hostPath" }}
    hostPath:
      path: {{ $v.hostPath.path }}
      type: {{ $v.hostPath.type }}
  {{- else }}
  {{- fail (printf "kvOffload.volume.type must be emptyDir, pvc or hostPath, not %q" $v.type) }}
  {{- end }}
  {{- end }}
{{- with .Values.nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.affinity }}
affinity:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end }}

{{/* Pod metadata (labels, annotations) for the role "server", "leader" or "worker". */}}
{{- define "strata.podMetadata" -}}
{{- $top := index . 0 }}
{{- $role := index . 1 -}}
labels:
  {{- include "strata.selectorLabels" $top | nindent 2 }}
  app.kubernetes.io/component: {{ $role }}
  {{- with $top.Values.podLabels }}
  {{- toYaml . | nindent 2 }}
  {{- end }}
{{- with $top.Values.podAnnotations }}
annotations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end }}

{{/* The workload autoscaling and PodDisruptionBudgets point at. */}}
{{- define "strata.scaleTargetRef" -}}
{{- if eq .Values.mode "multi" }}
apiVersion: leaderworkerset.x-k8s.io/v1
kind: LeaderWorkerSet
{{- else }}
apiVersion: apps/v1
kind: Deployment
{{- end }}
name: {{ include "strata.fullname" . }}
{{- end }}
