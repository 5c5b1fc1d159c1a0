"""Names upstream's JobSet controller (kubernetes-sigs/jobset, v1alpha2) puts on objects, and the reasons and
messages of its conditions and Events. Tools that read them (kubectl, dashboards, Kueue) keep working."""

from __future__ import annotations

GROUP = "jobset.x-k8s.io"
VERSION = "v1alpha2"
PLURAL = "jobsets"
API_VERSION = f"{GROUP}/{VERSION}"
KIND = "JobSet"

# spec.managedBy of JobSets this controller runs (unset means the same).
CONTROLLER_NAME = "jobset.sigs.k8s.io/jobset-controller"

# Labels and annotations on child Jobs and their pod templates.
JOBSET_NAME_KEY = "jobset.sigs.k8s.io/jobset-name"
JOBSET_UID_KEY = "jobset.sigs.k8s.io/jobset-uid"
REPLICATED_JOB_NAME_KEY = "jobset.sigs.k8s.io/replicatedjob-name"
REPLICATED_JOB_REPLICAS_KEY = "jobset.sigs.k8s.io/replicatedjob-replicas"
GLOBAL_REPLICAS_KEY = "jobset.sigs.k8s.io/global-replicas"
JOB_INDEX_KEY = "jobset.sigs.k8s.io/job-index"
JOB_GLOBAL_INDEX_KEY = "jobset.sigs.k8s.io/job-global-index"
JOB_KEY = "jobset.sigs.k8s.io/job-key"
RESTARTS_KEY = "jobset.sigs.k8s.io/restart-attempt"
GROUP_NAME_KEY = "jobset.sigs.k8s.io/group-name"
GROUP_REPLICAS_KEY = "jobset.sigs.k8s.io/group-replicas"
JOB_GROUP_INDEX_KEY = "jobset.sigs.k8s.io/job-group-index"
COORDINATOR_KEY = "jobset.sigs.k8s.io/coordinator"
EXCLUSIVE_KEY = "alpha.jobset.sigs.k8s.io/exclusive-topology"
NODE_SELECTOR_STRATEGY_KEY = "alpha.jobset.sigs.k8s.io/node-selector"
NAMESPACED_JOB_KEY = "alpha.jobset.sigs.k8s.io/namespaced-job"
NO_SCHEDULE_TAINT_KEY = "alpha.jobset.sigs.k8s.io/no-schedule"

# Set by the batch/v1 Job controller on Indexed pods.
COMPLETION_INDEX_ANNOTATION = "batch.kubernetes.io/job-completion-index"

# gangq's own.
FRAMEWORK_ANNOTATION = "gangq.io/framework"
FRAMEWORK_PORT_ANNOTATION = "gangq.io/framework-port"
MPI_LAUNCHER_ANNOTATION = "gangq.io/mpi-launcher"
MPI_SLOTS_ANNOTATION = "gangq.io/mpi-slots-per-worker"
NPROC_PER_NODE_ANNOTATION = "gangq.io/nproc-per-node"

# Condition types.
COND_COMPLETED = "Completed"
COND_FAILED = "Failed"
COND_SUSPENDED = "Suspended"
COND_STARTUP_IN_PROGRESS = "StartupPolicyInProgress"
COND_STARTUP_COMPLETED = "StartupPolicyCompleted"

# Reasons and messages (upstream's constants).
REACHED_MAX_RESTARTS_REASON = "ReachedMaxRestarts"
REACHED_MAX_RESTARTS_MESSAGE = "jobset failed due to reaching max number of restarts"
FAILED_JOBS_REASON = "FailedJobs"
FAILED_JOBS_MESSAGE = "jobset failed due to one or more job failures"
ALL_JOBS_COMPLETED_REASON = "AllJobsCompleted"
ALL_JOBS_COMPLETED_MESSAGE = "jobset completed successfully"
JOB_CREATION_FAILED_REASON = "JobCreationFailed"
SERVICE_CREATION_FAILED_REASON = "HeadlessServiceCreationFailed"
IN_ORDER_IN_PROGRESS_REASON = "InOrderStartupPolicyInProgress"
IN_ORDER_IN_PROGRESS_MESSAGE = "in order startup policy is in progress"
IN_ORDER_COMPLETED_REASON = "InOrderStartupPolicyCompleted"
IN_ORDER_COMPLETED_MESSAGE = "in order startup policy has completed"
SUSPENDED_REASON = "SuspendedJobs"
SUSPENDED_MESSAGE = "jobset is suspended"
RESUMED_REASON = "ResumeJobs"
RESUMED_MESSAGE = "jobset is resumed"
FAIL_JOBSET_ACTION_REASON = "FailJobSetFailurePolicyAction"
FAIL_JOBSET_ACTION_MESSAGE = "applying FailJobSet failure policy action"
RESTART_JOBSET_ACTION_REASON = "RestartJobSetFailurePolicyAction"
RESTART_JOBSET_ACTION_MESSAGE = "applying RestartJobSet failure policy action"
RESTART_IGNORE_MAX_ACTION_REASON = "RestartJobSetAndIgnoreMaxRestartsFailurePolicyAction"
RESTART_IGNORE_MAX_ACTION_MESSAGE = "applying RestartJobSetAndIgnoreMaxRestarts failure policy action"
# gangq's: an invalid JobSet (no admission webhook in front of the embedded controller).
VALIDATION_FAILED_REASON = "ValidationFailed"
FRAMEWORK_WARNING_REASON = "FrameworkWiring"

TERMINAL_COMPLETED = "Completed"
TERMINAL_FAILED = "Failed"
