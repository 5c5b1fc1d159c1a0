"""What upstream's JobSet webhook and CRD reject, checked by the embedded controller itself.

With no admission webhook in front of gangq's controller, an invalid JobSet is accepted by the API server; the
reconciler then marks it Failed (reason ``ValidationFailed``) with a message that names the field and the rule, posts
a Warning Event, and creates no children. :func:`validate` returns every violation, first by field order.
"""

from __future__ import annotations

import re
from typing import Any

from gangq.api.jobset import JOB_FAILURE_REASONS, JobSet

from . import constants as c

MAX_INT32 = 2**31 - 1
_DNS1035 = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
_DNS1123_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_DNS1123_SUBDOMAIN = re.compile(rf"^{_DNS1123_LABEL}(\.{_DNS1123_LABEL})*$")
_RULE_NAME = re.compile(r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$")
_DOMAIN_PREFIXED_PATH = re.compile(rf"^{_DNS1123_LABEL}(\.{_DNS1123_LABEL})*/[-A-Za-z0-9/_.~%!$&'()*+,;=:]+$")
FRAMEWORKS = ("pytorch", "tensorflow", "jax", "mpi")
SUPPORTED_ACTIONS = ("FailJobSet", "RestartJobSet", "RestartJobSetAndIgnoreMaxRestarts",
                     "RestartJob", "RestartJobAndIgnoreMaxRestarts")


class Violation:
    """One broken rule: the field path (``spec.replicatedJobs[1].dependsOn[0].name``) and the rule."""

    __slots__ = ("field", "message")

    def __init__(self, field: str, message: str) -> None:
        self.field = field
        self.message = message

    def __str__(self) -> str:
        return f"{self.field}: {self.message}"

    def __repr__(self) -> str:
        return f"Violation({self.field!r}, {self.message!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Violation) and (self.field, self.message) == (other.field, other.message)

    def __hash__(self) -> int:
        return hash((self.field, self.message))


def _dns1035(value: str, field: str, what: str, too_long: str) -> list[Violation]:
    out = []
    if len(value) > 63:
        out.append(Violation(field, f"{too_long} ({what} {value!r} has {len(value)} characters, at most 63)"))
    if not _DNS1035.match(value):
        out.append(Violation(field, f"{what} {value!r} must be a DNS-1035 label: lower case alphanumeric characters "
                                    "or '-', starting with a letter and ending with an alphanumeric character"))
    return out


def pods_per_job(job_spec: Any) -> int:
    """Pods a Job runs at once: min(parallelism, completions), parallelism defaulting to 1."""
    parallelism = 1 if job_spec.parallelism is None else int(job_spec.parallelism)
    if job_spec.completions is not None:
        return min(parallelism, int(job_spec.completions))
    return parallelism


def validate(js: JobSet) -> list[Violation]:
    """Every violation of upstream's validation (and gangq's annotations) in a JobSet with defaults applied."""
    out: list[Violation] = []
    name = js.metadata.name or ""
    spec = js.spec
    annotations = js.metadata.annotations or {}
    rjobs = js.replicated_jobs()
    names = [r.name for r in rjobs]
    if not rjobs:
        out.append(Violation("spec.replicatedJobs", "must have at least one replicatedJob"))
    subdomain = (spec.network.subdomain if spec.network else None) or ""
    if subdomain:
        if len(subdomain) > 63:
            out.append(Violation("spec.network.subdomain", ".spec.network.subdomain is too long, must be less than 63 "
                                                           f"characters (has {len(subdomain)})"))
        if not _DNS1123_SUBDOMAIN.match(subdomain) or not _DNS1035.match(subdomain):
            out.append(Violation("spec.network.subdomain", f"{subdomain!r} must be a valid DNS-1123 subdomain and a "
                                                           "DNS-1035 label (it names the headless Service)"))
    elif name and len(name) > 63:
        out.append(Violation("metadata.name", "the JobSet name is the default subdomain and Service name: at most "
                                              "63 characters"))
    if spec.managed_by is not None:
        if not _DOMAIN_PREFIXED_PATH.match(spec.managed_by):
            out.append(Violation("spec.managedBy", f"{spec.managed_by!r} must be a domain-prefixed path "
                                                   "(such as 'acme.io/foo')"))
        if len(spec.managed_by) > 63:
            out.append(Violation("spec.managedBy", "may not be longer than 63 characters"))
    seen: dict[str, int] = {}
    in_order = spec.startup_policy is not None and spec.startup_policy.startup_policy_order == "InOrder"
    for i, rjob in enumerate(rjobs):
        base = f"spec.replicatedJobs[{i}]"
        if rjob.name in seen:
            out.append(Violation(f"{base}.name", f"duplicate replicatedJob name {rjob.name!r} "
                                                 f"(also spec.replicatedJobs[{seen[rjob.name]}])"))
        replicas = 1 if rjob.replicas is None else rjob.replicas
        job = rjob.template.spec
        parallelism = 1 if job.parallelism is None else job.parallelism
        if parallelism * replicas > MAX_INT32:
            out.append(Violation(f"{base}.replicas", f"the product of replicas and parallelism must not exceed "
                                                     f"{MAX_INT32} for replicatedJob {rjob.name!r}"))
        longest_job = f"{name}-{rjob.name}-{max(replicas - 1, 0)}"
        out += _dns1035(longest_job, f"{base}.name", "generated Job name",
                        "JobSet name is too long, job names generated for this JobSet will exceed 63 characters")
        if job.completion_mode == "Indexed":
            if job.completions is None:
                out.append(Violation(f"{base}.template.spec.completions",
                                     "must be set when completionMode is Indexed (the Job would be rejected)"))
            else:
                longest_pod = f"{longest_job}-{max(job.completions - 1, 0)}-abcde"
                if len(longest_pod) > 63:
                    out.append(Violation(f"{base}.name", "JobSet name is too long, pod names generated for this "
                                                         f"JobSet will exceed 63 characters ({longest_pod!r})"))
        if rjob.depends_on:
            if len(rjob.depends_on) > 1:
                out.append(Violation(f"{base}.dependsOn", "must have at most 1 item"))
            for k, dep in enumerate(rjob.depends_on):
                if dep.name not in seen:
                    out.append(Violation(f"{base}.dependsOn[{k}].name",
                                         f"replicatedJob: {rjob.name} cannot depend on replicatedJob: {dep.name} "
                                         "(only on a replicatedJob listed before it)"))
            if in_order:
                out.append(Violation(f"{base}.dependsOn", "StartupPolicy InOrder and DependsOn APIs are mutually "
                                                          "exclusive"))
        seen.setdefault(rjob.name, i)
    if spec.success_policy is not None:
        for k, target in enumerate(spec.success_policy.target_replicated_jobs or []):
            if target not in names:
                out.append(Violation(f"spec.successPolicy.targetReplicatedJobs[{k}]",
                                     f"invalid replicatedJob name {target!r} does not appear in .spec.replicatedJobs"))
    out += _validate_failure_policy(js, names)
    out += _validate_coordinator(js)
    out += _validate_framework(annotations, names)
    return out


def _validate_failure_policy(js: JobSet, names: list[str]) -> list[Violation]:
    out: list[Violation] = []
    fp = js.spec.failure_policy
    if fp is None:
        return out
    by_name: dict[str, int] = {}
    for i, rule in enumerate(fp.rules or []):
        base = f"spec.failurePolicy.rules[{i}]"
        rname = rule.name or ""
        if not 1 <= len(rname) <= 128:
            out.append(Violation(f"{base}.name", f"invalid failure policy rule name of length {len(rname)}, the rule "
                                                 "name must be at least 1 characters long and at most 128 characters "
                                                 "long"))
        elif not _RULE_NAME.match(rname):
            out.append(Violation(f"{base}.name", f"invalid failure policy rule name {rname!r}, a failure policy rule "
                                                 "name must start with an alphabetic character, optionally followed "
                                                 "by a string of alphanumeric characters or '_,:', and must end with "
                                                 "an alphanumeric character or '_'"))
        if rname in by_name:
            out.append(Violation(f"{base}.name", f"rule names are not unique, rules with indices [{by_name[rname]} "
                                                 f"{i}] all have the same name {rname!r}"))
        by_name.setdefault(rname, i)
        for k, target in enumerate(rule.target_replicated_jobs or []):
            if target not in names:
                out.append(Violation(f"{base}.targetReplicatedJobs[{k}]", f"invalid replicatedJob name {target!r} "
                                     "in failure policy does not appear in .spec.replicatedJobs"))
        for k, reason in enumerate(rule.on_job_failure_reasons or []):
            if reason not in JOB_FAILURE_REASONS:
                out.append(Violation(f"{base}.onJobFailureReasons[{k}]", f"invalid job failure reason {reason!r} in "
                                     f"failure policy is not a recognized job failure reason (one of "
                                     f"{', '.join(JOB_FAILURE_REASONS)})"))
        for k, pattern in enumerate(rule.on_job_failure_message_patterns or []):
            try:
                re.compile(pattern)
            except re.error as err:
                out.append(Violation(f"{base}.onJobFailureMessagePatterns[{k}]",
                                     f"invalid regular expression {pattern!r}: {err}"))
    return out


def _validate_coordinator(js: JobSet) -> list[Violation]:
    coord = js.spec.coordinator
    if coord is None:
        return []
    rjob = next((r for r in js.replicated_jobs() if r.name == coord.replicated_job), None)
    if rjob is None:
        return [Violation("spec.coordinator.replicatedJob",
                          f"coordinator replicatedJob {coord.replicated_job} does not exist")]
    replicas = 1 if rjob.replicas is None else rjob.replicas
    job_index = coord.job_index or 0
    pod_index = coord.pod_index or 0
    if job_index >= replicas:
        return [Violation("spec.coordinator.jobIndex",
                          f"coordinator job index {job_index} is invalid for replicatedJob {rjob.name} "
                          f"(it has {replicas} replicas)")]
    if rjob.template.spec.completion_mode != "Indexed":
        return [Violation("spec.coordinator.replicatedJob",
                          f"job for coordinator pod must be indexed completion mode, and replicatedJob {rjob.name} "
                          "is not")]
    if pod_index >= pods_per_job(rjob.template.spec):
        return [Violation("spec.coordinator.podIndex",
                          f"coordinator pod index {pod_index} is invalid for replicatedJob {rjob.name} job index "
                          f"{job_index} (it runs {pods_per_job(rjob.template.spec)} pods)")]
    return []


def _validate_framework(annotations: dict[str, str], names: list[str]) -> list[Violation]:
    framework = annotations.get(c.FRAMEWORK_ANNOTATION)
    if framework is None:
        return []
    field = f"metadata.annotations[{c.FRAMEWORK_ANNOTATION}]"
    if framework not in FRAMEWORKS:
        return [Violation(field, f"unknown framework {framework!r}: one of {', '.join(FRAMEWORKS)}")]
    out = []
    port = annotations.get(c.FRAMEWORK_PORT_ANNOTATION)
    if port is not None and not (port.isdigit() and 1 <= int(port) <= 65535):
        out.append(Violation(f"metadata.annotations[{c.FRAMEWORK_PORT_ANNOTATION}]",
                             f"must be a port number 1-65535, got {port!r}"))
    if framework == "mpi":
        launcher = annotations.get(c.MPI_LAUNCHER_ANNOTATION, "launcher")
        if launcher not in names:
            out.append(Violation(f"metadata.annotations[{c.MPI_LAUNCHER_ANNOTATION}]",
                                 f"the MPI launcher replicatedJob {launcher!r} does not exist (default 'launcher')"))
        elif len(names) < 2:
            out.append(Violation("spec.replicatedJobs", "MPI needs a launcher and at least one worker replicatedJob"))
        slots = annotations.get(c.MPI_SLOTS_ANNOTATION)
        if slots is not None and not (slots.isdigit() and int(slots) >= 1):
            out.append(Violation(f"metadata.annotations[{c.MPI_SLOTS_ANNOTATION}]",
                                 f"must be a positive integer, got {slots!r}"))
    return out
