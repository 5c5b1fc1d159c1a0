"""kwok's configuration for the real control plane: Stages that give pods on simulated nodes the
emulated sandbox's behaviour, so that the same manifests run on both control planes.

The mapping (docs/sandbox.md, "The real control plane"):

- a pod bound to a node becomes Running and Ready after ``sandbox.gangq.io/start-delay-seconds``
  (default 0);
- its containers exit after ``sandbox.gangq.io/run-seconds`` (default 1; negative or ``inf``:
  it runs until deleted): phase Succeeded when ``sandbox.gangq.io/exit-code`` is absent or ``0``,
  else Failed with that exit code;
- a pod being deleted is removed at once (its finalizers cleared).

kwok parses a delay with Go's ``time.ParseDuration``; an annotation that does not parse falls back
to the stage's default delay.
"""

from __future__ import annotations

START_DELAY = "sandbox.gangq.io/start-delay-seconds"
RUN_SECONDS = "sandbox.gangq.io/run-seconds"
EXIT_CODE = "sandbox.gangq.io/exit-code"
# Nodes that kwok manages carry this annotation (``--manage-nodes-with-annotation-selector``).
NODE_ANNOTATION = "kwok.x-k8s.io/node"
NODE_ANNOTATION_VALUE = "fake"


def _annotation(name: str, default: str) -> str:
    return f'(.metadata.annotations["{name}"] // "{default}")'


_RUNS_FOREVER = (
    f'{_annotation(RUN_SECONDS, "1")} | ascii_downcase | '
    '(startswith("-") or . == "inf" or . == "+inf" or . == "infinity")'
)
_SUCCEEDS = f'{_annotation(EXIT_CODE, "0")} | . == "0"'

_RUNNING_AND_READY = """\
    - key: '.metadata.deletionTimestamp'
      operator: DoesNotExist
    - key: '.status.phase'
      operator: In
      values: [Running]
    - key: '.status.conditions.[] | select(.type == "Ready") | .status'
      operator: In
      values: ["True"]
    - key: '{forever}'
      operator: In
      values: ["false"]
    - key: '{succeeds}'
      operator: In
      values: ["{outcome}"]"""


def _finish_stage(name: str, succeeds: bool) -> str:
    selector = _RUNNING_AND_READY.format(
        forever=_RUNS_FOREVER, succeeds=_SUCCEEDS, outcome="true" if succeeds else "false"
    )
    if succeeds:
        exit_code, reason, phase = "0", "Completed", "Succeeded"
    else:
        exit_code, reason, phase = f'{{{{ index $.metadata.annotations "{EXIT_CODE}" }}}}', "Error", "Failed"
    return f"""\
apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata:
  name: {name}
spec:
  resourceRef:
    apiGroup: v1
    kind: Pod
  selector:
    matchExpressions:
{selector}
  delay:
    durationMilliseconds: 1000
    durationFrom:
      jq: {{expression: '{_annotation(RUN_SECONDS, "1")} + "s"'}}
  next:
    statusTemplate: |
      {{{{ $now := Now }}}}
      containerStatuses:
      {{{{ range $index, $item := .spec.containers }}}}
      {{{{ $origin := index $.status.containerStatuses $index }}}}
      - image: {{{{ $item.image | Quote }}}}
        name: {{{{ $item.name | Quote }}}}
        ready: false
        restartCount: 0
        started: false
        state:
          terminated:
            exitCode: {exit_code}
            finishedAt: {{{{ $now | Quote }}}}
            reason: {reason}
            startedAt: {{{{ $origin.state.running.startedAt | Quote }}}}
      {{{{ end }}}}
      conditions:
      - lastTransitionTime: {{{{ $now | Quote }}}}
        status: "False"
        type: Ready
        reason: PodCompleted
      - lastTransitionTime: {{{{ $now | Quote }}}}
        status: "False"
        type: ContainersReady
        reason: PodCompleted
      phase: {phase}
"""


_NODE_READY = """\
apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata:
  name: gangq-node-ready
spec:
  resourceRef:
    apiGroup: v1
    kind: Node
  selector:
    matchExpressions:
    - key: '.status.conditions.[] | select(.type == "Ready") | .status'
      operator: NotIn
      values: ["True"]
  next:
    statusTemplate: |
      {{ $now := Now }}
      conditions:
      - lastHeartbeatTime: {{ $now | Quote }}
        lastTransitionTime: {{ $now | Quote }}
        message: kubelet is posting ready status
        reason: KubeletReady
        status: "True"
        type: Ready
      phase: Running
"""

_POD_READY = f"""\
apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata:
  name: gangq-pod-ready
spec:
  resourceRef:
    apiGroup: v1
    kind: Pod
  selector:
    matchExpressions:
    - key: '.metadata.deletionTimestamp'
      operator: DoesNotExist
    - key: '.status.phase'
      operator: In
      values: [Pending]
    - key: '.spec.nodeName'
      operator: Exists
  delay:
    durationMilliseconds: 0
    durationFrom:
      jq: {{expression: '{_annotation(START_DELAY, "0")} + "s"'}}
  next:
    statusTemplate: |
      {{{{ $now := Now }}}}
      conditions:
      - lastTransitionTime: {{{{ $now | Quote }}}}
        status: "True"
        type: Initialized
      - lastTransitionTime: {{{{ $now | Quote }}}}
        status: "True"
        type: Ready
      - lastTransitionTime: {{{{ $now | Quote }}}}
        status: "True"
        type: ContainersReady
      containerStatuses:
      {{{{ range .spec.containers }}}}
      - image: {{{{ .image | Quote }}}}
        name: {{{{ .name | Quote }}}}
        ready: true
        restartCount: 0
        started: true
        state:
          running:
            startedAt: {{{{ $now | Quote }}}}
      {{{{ end }}}}
      hostIP: {{{{ NodeIPWith .spec.nodeName | Quote }}}}
      podIP: {{{{ PodIPWith .spec.nodeName ( or .spec.hostNetwork false ) ( or .metadata.uid "" )
        ( or .metadata.name "" ) ( or .metadata.namespace "" ) | Quote }}}}
      phase: Running
      startTime: {{{{ $now | Quote }}}}
"""

_POD_DELETE = """\
apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata:
  name: gangq-pod-delete
spec:
  resourceRef:
    apiGroup: v1
    kind: Pod
  selector:
    matchExpressions:
    - key: '.metadata.deletionTimestamp'
      operator: Exists
  next:
    finalizers:
      empty: true
    delete: true
"""


def stages() -> str:
    """Every Stage, as one multi-document YAML text for ``kwok --config``."""
    docs = [
        _NODE_READY,
        _POD_READY,
        _finish_stage("gangq-pod-succeeded", succeeds=True),
        _finish_stage("gangq-pod-failed", succeeds=False),
        _POD_DELETE,
    ]
    return "---\n".join(docs)
