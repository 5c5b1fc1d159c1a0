"""Where the files gangq needs at run time live: the CRDs (``crds/``) and the queue
configurations (``policies/``).

In a checkout (and an editable install) they are the top-level directories. A regular
``pip install .`` copies them into the package as ``gangq/_data/`` (see setup.py), because
site-packages has no checkout around it; without that, ``gangq run`` installed no CRDs and
failed on ``policies/quickstart.yaml``.
"""

from __future__ import annotations

from pathlib import Path

_PACKAGE = Path(__file__).resolve().parent
_BUNDLED = _PACKAGE / "_data"
_CHECKOUT = _PACKAGE.parent


# Bundled directories and where each lives in a checkout.
_SOURCES = {"crds": "crds", "policies": "policies", "control-plane": "hack/control-plane", "deploy": "deploy"}


def data_dir(name: str) -> Path:
    """The directory ``crds``, ``policies``, ``control-plane`` (the Go modules that pin the real
    control plane) or ``deploy`` (the install manifests): bundled in the installed package, else
    the checkout's."""
    bundled = _BUNDLED / name
    return bundled if bundled.is_dir() else _CHECKOUT / _SOURCES[name]


def crd_dir() -> Path:
    return data_dir("crds")


def policy_file(name: str) -> Path:
    """A file of ``policies/``, e.g. ``quickstart.yaml``."""
    return data_dir("policies") / name
