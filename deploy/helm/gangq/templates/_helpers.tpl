{{/*
Labels Helm adds to every object on top of the install's own (deploy/base): which chart, release
and version made it. tests/deploy/test_chart.py strips exactly these when it compares the chart
with the Kustomize install.
*/}}
{{- define "gangq.helmLabels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
{{- end }}

{{/*
The labels of an object of component .component (controller, webhook, jobset-controller).
*/}}
{{- define "gangq.labels" -}}
app.kubernetes.io/name: gangq
app.kubernetes.io/component: {{ .component }}
app.kubernetes.io/part-of: gangq
{{ include "gangq.helmLabels" .root }}
{{- end }}

{{/*
The controller's pods: the Deployment's selector, the Services' and the PodDisruptionBudget's.
Fixed, so that an install can move between the chart and the Kustomize manifests (a Deployment's
selector cannot change).
*/}}
{{- define "gangq.selector" -}}
app.kubernetes.io/name: gangq
app.kubernetes.io/component: controller
{{- end }}

{{/*
The controller's ServiceAccount as a binding subject.
*/}}
{{- define "gangq.subject" -}}
- kind: ServiceAccount
  name: gangq-controller
  namespace: {{ .Release.Namespace }}
{{- end }}

{{- define "gangq.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end }}

{{/*
The controller's configuration file: config from the values, with the namespace of the Lease, of
the webhook's and the pending-workloads API's Services and Secrets set to the release namespace,
and the API's port and address (the pod's IP: kube-apiserver calls it there).
*/}}
{{- define "gangq.config" -}}
{{- $config := deepCopy .Values.config -}}
{{- $election := get $config "leaderElection" | default dict -}}
{{- $_ := set $election "namespace" .Release.Namespace -}}
{{- $_ := set $config "leaderElection" $election -}}
{{- if .Values.visibility.enabled -}}
{{- $visibility := get $config "visibility" | default dict -}}
{{- $_ := set $visibility "port" .Values.visibility.port -}}
{{- $_ := set $visibility "bind" "0.0.0.0" -}}
{{- $_ := set $visibility "namespace" .Release.Namespace -}}
{{- $_ := set $config "visibility" $visibility -}}
{{- end -}}
{{- if .Values.webhook.enabled -}}
{{- $webhook := get $config "webhook" | default dict -}}
{{- $_ := set $webhook "namespace" .Release.Namespace -}}
{{- if .Values.webhook.hosts -}}
{{- $_ := set $webhook "hosts" .Values.webhook.hosts -}}
{{- end -}}
{{- $_ := set $config "webhook" $webhook -}}
{{- end -}}
{{ toYaml $config }}
{{- end }}

{{- define "gangq.metricsPort" -}}
{{ .Values.config.metricsPort | default 8080 | int }}
{{- end }}

{{- define "gangq.leaseName" -}}
{{ (.Values.config.leaderElection | default dict).leaseName | default "gangq-controller" }}
{{- end }}

{{/*
Whether the API server serves the Prometheus Operator's kinds (or helm template was told so with
--api-versions monitoring.coreos.com/v1).
*/}}
{{- define "gangq.hasMonitoring" -}}
{{- if .Capabilities.APIVersions.Has "monitoring.coreos.com/v1" -}}true{{- end -}}
{{- end }}

{{/*
The workload kinds the webhook is sent: the kinds of gangq/integrations/registry.py, written by
hack/gen-chart.py. .operations: the admission operations of the entry.
*/}}
{{- define "gangq.webhookRules" -}}
- apiGroups:
  - jobset.x-k8s.io
  apiVersions:
  - v1alpha2
  operations: {{ toYaml .operations | nindent 2 }}
  resources:
  - jobsets
  scope: Namespaced
- apiGroups:
  - batch
  apiVersions:
  - v1
  operations: {{ toYaml .operations | nindent 2 }}
  resources:
  - jobs
  scope: Namespaced
- apiGroups:
  - kubeflow.org
  apiVersions:
  - v1
  operations: {{ toYaml .operations | nindent 2 }}
  resources:
  - pytorchjobs
  - tfjobs
  scope: Namespaced
- apiGroups:
  - kubeflow.org
  apiVersions:
  - v2beta1
  operations: {{ toYaml .operations | nindent 2 }}
  resources:
  - mpijobs
  scope: Namespaced
- apiGroups:
  - ray.io
  apiVersions:
  - v1
  operations: {{ toYaml .operations | nindent 2 }}
  resources:
  - rayjobs
  - rayclusters
  scope: Namespaced
- apiGroups:
  - trainer.kubeflow.org
  apiVersions:
  - v1alpha1
  operations: {{ toYaml .operations | nindent 2 }}
  resources:
  - trainjobs
  scope: Namespaced
- apiGroups:
  - scheduling.x-k8s.io
  apiVersions:
  - v1alpha1
  operations: {{ toYaml .operations | nindent 2 }}
  resources:
  - podgroups
  scope: Namespaced
{{- end }}
{{/*
The pods the mutating entries are sent, when a kind of gangq/integrations/registry.py gates its
pods at creation (a pod group's), written by hack/gen-chart.py.
*/}}
{{- define "gangq.podWebhookRules" -}}
- apiGroups:
  - ''
  apiVersions:
  - v1
  operations:
  - CREATE
  resources:
  - pods
  scope: Namespaced
{{- end }}
