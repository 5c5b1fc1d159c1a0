"""The controller image (deploy/Dockerfile, built here by hack/build-image.sh with buildah) as the
Deployment runs it: as user 65532, writing nothing to its root filesystem (which the Deployment
mounts read-only), with the mypyc-compiled engine and no compiler, and `gangq run` with a pod's
in-cluster credentials (the ServiceAccount's token, CA
and namespace mounted at /var/run/secrets/kubernetes.io/serviceaccount, KUBERNETES_SERVICE_HOST
and _PORT) against the real control plane, where it takes the leader Lease and admits a gang that
completes.

The image is built by the script (a no-op when its cache holds it; .ci/run builds it first) and run
with buildah's chroot isolation, which shares this machine's network and process table: the test
finds the controller's process and checks who and where it runs."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest
import yaml

import gangq
from gangq.controlplane.launcher import ControlPlane
from gangq.controlplane.pki import CONTROLLER_NAMESPACE
from tests.conftest import _unavailable
from tests.controlplane.install import install
from tests.controlplane.kube import RUN_CONFIG, get, kubectl, namespace, wait_for
from tests.controlplane.test_gangq_run import _jobset, _queues

REPO = Path(__file__).resolve().parents[2]
BUILD = REPO / "hack" / "build-image.sh"
USER = 65532
# Where a pod has its ServiceAccount's credentials, /var/run/secrets/kubernetes.io/serviceaccount,
# as the mount names it: /var/run links to /run in the image, and buildah would follow that link
# on this machine's side, mounting nothing into the container.
SERVICE_ACCOUNT_DIR = "/run/secrets/kubernetes.io/serviceaccount"
LEASE = f"/apis/coordination.k8s.io/v1/namespaces/{CONTROLLER_NAMESPACE}/leases/gangq-controller"


def _storage() -> list[str]:
    """buildah's storage options, as hack/build-image.sh sets them."""
    cache = os.environ.get("GANGQ_IMAGE_CACHE") or str(
        Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "gangq" / "image"
    )
    return ["--root", f"{cache}/storage", "--runroot", f"{cache}/run", "--storage-driver", "vfs"]


def buildah(*args: str, timeout: float = 120) -> str:
    done = subprocess.run(["buildah", *_storage(), *args], capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, f"buildah {' '.join(args)}: {done.stderr.strip()[-2000:]}"
    return done.stdout


def run_command(container: str, *command: str, user: str = f"{USER}:{USER}",
                mounts: tuple[str, ...] = (), env: dict[str, str] | None = None) -> list[str]:
    """``buildah run`` of ``command`` in ``container`` as the image runs in a pod: as ``user``, with
    an empty, writable /tmp (the Deployment's emptyDir) and this machine's network."""
    options = ["--isolation", "chroot", "--user", user, "--mount", "type=tmpfs,destination=/tmp"]
    for mount in mounts:
        options += ["--mount", mount]
    for name, value in (env or {}).items():
        options += ["--env", f"{name}={value}"]
    return ["buildah", *_storage(), "run", *options, container, "--", *command]


@pytest.fixture(scope="module")
def image() -> str:
    """The image's local reference: the last line of hack/build-image.sh's output."""
    missing = [tool for tool in ("buildah", "debootstrap") if shutil.which(tool) is None]
    if missing:
        _unavailable(f"{' and '.join(missing)} not installed (Debian: apt-get install buildah debootstrap)")
    if os.geteuid() != 0:
        _unavailable("building and running the image with buildah's vfs storage needs root")
    done = subprocess.run(["bash", str(BUILD)], capture_output=True, text=True, timeout=3600, cwd=REPO)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout.strip().splitlines()[-1]


@pytest.fixture
def container(image: str) -> Iterator[tuple[str, Path]]:
    """A working container of the image and its root filesystem on this machine."""
    name = buildah("from", "--pull=never", "--name", f"gangq-image-test-{uuid.uuid4().hex[:8]}", image).strip()
    try:
        yield name, Path(buildah("mount", name).strip())
    finally:
        buildah("rm", name)


def _root_files(root: Path) -> dict[str, tuple[object, ...]]:
    """Every entry of a root filesystem but the kernel's (/proc, /sys, /dev): the mode of each,
    the size and modification time of files, the target of links. Directories' times are left
    out: buildah creates and removes its own files in /run on every run."""
    out: dict[str, tuple[object, ...]] = {}
    for path in root.rglob("*"):
        relative = path.relative_to(root)
        if relative.parts[0] in ("proc", "sys", "dev"):
            continue
        st = path.lstat()
        if path.is_symlink():
            out[str(relative)] = (st.st_mode, os.readlink(path))
        elif path.is_dir():
            out[str(relative)] = (st.st_mode,)
        else:
            out[str(relative)] = (st.st_mode, st.st_size, st.st_mtime_ns)
    return out


def test_the_image_runs_as_65532_with_the_compiled_engine_and_no_compiler(
    image: str, container: tuple[str, Path]
) -> None:
    name, root = container
    config = json.loads(buildah("inspect", "--type", "image", image))["OCIv1"]["config"]
    assert config["User"] == f"{USER}:{USER}"
    assert config["Entrypoint"] == ["gangq"] and config["Cmd"] == ["run"]

    def run(*command: str) -> str:
        done = subprocess.run(run_command(name, *command), capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr[-2000:]
        return done.stdout.strip()

    assert run("gangq", "--version") == f"gangq {gangq.__version__}"
    probe = "import gangq.core, os, sys; print(gangq.core.compiled(), os.getuid(), os.getgid(), sys.prefix)"
    assert run("python", "-c", probe).split() == ["True", str(USER), str(USER), "/opt/gangq"]
    compiled = sorted(p.name for p in root.glob("opt/gangq/lib/python3*/site-packages/gangq/core/*.so"))
    assert compiled, "no compiled module in gangq/core"
    tools = [p.name for pattern in ("gcc*", "*-gcc*", "cc", "c++", "cpp*", "as", "ld", "*-ld*")
             for p in root.glob(f"usr/bin/{pattern}")]
    assert not tools, f"the image holds a compiler, assembler or linker: {tools}"
    assert not (root / "usr/lib/gcc").exists()
    assert not list(root.glob("usr/include/python3*/Python.h"))
    assert not (root / "opt/gangq/bin/pip").exists()


def _in_cluster(workdir: Path, cp: ControlPlane) -> tuple[tuple[str, ...], dict[str, str]]:
    """The mounts and environment of the Deployment's pod: the ServiceAccount's token, CA and
    namespace where a pod has them, the configuration file at /etc/gangq/config.yaml, and the API
    server's address."""
    sa = workdir / "serviceaccount"
    sa.mkdir()
    (sa / "token").write_text(cp.pki.identities["controller"].token)
    shutil.copy(cp.pki.ca_cert, sa / "ca.crt")
    (sa / "namespace").write_text(CONTROLLER_NAMESPACE)
    etc = workdir / "etc-gangq"
    etc.mkdir()
    (etc / "config.yaml").write_text(yaml.safe_dump(RUN_CONFIG))
    for directory in (sa, etc):  # readable by 65532, as kubelet's volumes are
        directory.chmod(0o755)
        for file in directory.iterdir():
            file.chmod(0o644)
    host, port = cp.url.removeprefix("https://").rsplit(":", 1)
    mounts = (f"type=bind,source={sa},destination={SERVICE_ACCOUNT_DIR},ro",
              f"type=bind,source={etc},destination=/etc/gangq,ro")
    # No POD_NAME: no Pod object stands for this container, so there is none to label as leader's.
    env = {"KUBERNETES_SERVICE_HOST": host, "KUBERNETES_SERVICE_PORT": port}
    return mounts, env


@contextlib.contextmanager
def _controller(command: list[str], log: Path) -> Iterator[subprocess.Popen[bytes]]:
    """``command`` (a ``buildah run``) in a process of its own until the block ends, then SIGTERM;
    no process of the container outlives the block."""
    with log.open("w") as out:
        proc = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT)
    try:
        yield proc
    finally:
        family = [proc.pid]
        with contextlib.suppress(psutil.NoSuchProcess):
            family += [p.pid for p in psutil.Process(proc.pid).children(recursive=True)]
        proc.terminate()
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)
        for pid in family:
            with contextlib.suppress(psutil.NoSuchProcess):
                psutil.Process(pid).kill()


def test_the_image_admits_a_gang_in_cluster_on_the_real_control_plane(
    control_plane: ControlPlane, container: tuple[str, Path], tmp_path: Path
) -> None:
    name, root = container
    install(control_plane)
    mounts, env = _in_cluster(tmp_path, control_plane)
    # A first run creates the mount points (/etc/gangq) in the root filesystem, as a kubelet
    # would have them; what the controller's run then changes there, a read-only root refuses.
    warm_up = subprocess.run(run_command(name, "true", mounts=mounts, env=env), capture_output=True, text=True,
                             timeout=120)
    assert warm_up.returncode == 0, warm_up.stderr[-2000:]
    before = _root_files(root)
    log = tmp_path / "gangq.log"
    command = run_command(name, "gangq", "run", "--config", "/etc/gangq/config.yaml", mounts=mounts, env=env)
    with _controller(command, log) as proc:
        def running() -> None:
            assert proc.poll() is None, log.read_text()[-3000:]

        def leader() -> psutil.Process | None:
            running()
            holder = (get(control_plane, LEASE) or {}).get("spec", {}).get("holderIdentity") or ""
            for p in psutil.Process(proc.pid).children(recursive=True):
                if str(p.pid) in holder.split("-"):  # the identity is <hostname>-<pid>-<n>
                    return p
            return None

        lead: psutil.Process = wait_for(leader, 90, "the image's controller to take the leader Lease")
        # The Lease's holder is the image's `gangq run`, run as 65532 by the image's Python.
        assert lead.uids().real == USER and lead.gids().real == USER
        assert lead.cmdline()[1:3] == ["/opt/gangq/bin/gangq", "run"], lead.cmdline()
        assert os.path.samefile(f"/proc/{lead.pid}/exe", root / "usr/bin" / Path(lead.exe()).name), lead.exe()

        ns = namespace(control_plane, "image-research")
        kubectl(control_plane, "apply", "--server-side", "-f", "-", input=_queues(ns))
        kubectl(control_plane, "apply", "--server-side", "-n", ns, "-f", "-",
                input=[_jobset("gang", "user-queue", pods=2, gpus=4, run_seconds=2)])

        def completed() -> bool:
            running()
            js = get(control_plane, f"/apis/jobset.x-k8s.io/v1alpha2/namespaces/{ns}/jobsets/gang") or {}
            return any(c["type"] == "Completed" and c["status"] == "True"
                       for c in js.get("status", {}).get("conditions", []))

        wait_for(completed, 120, "the gang's JobSet to complete")
        workloads = get(control_plane, f"/apis/gangq.io/v1alpha1/namespaces/{ns}/workloads")["items"]
        assert [wl["status"]["admission"]["clusterQueue"] for wl in workloads] == ["gpu-cq"]
        pods = get(control_plane, f"/api/v1/namespaces/{ns}/pods")["items"]
        assert len(pods) == 2 and all(p["spec"].get("nodeName") for p in pods)
        running()
    after = _root_files(root)
    changed = sorted(p for p in before.keys() | after.keys() if before.get(p) != after.get(p))
    assert not changed, changed
