"""The ``--nodes`` syntax under the emulator's name, for the code and docs that import it from here.

Both control planes parse it, so it lives below both, in :mod:`gangq.controlplane.nodespec`; new
code imports it from there.
"""

from gangq.controlplane.nodespec import DEFAULT_NODE_SPEC, NodeSpecError, parse_node_spec

__all__ = ["DEFAULT_NODE_SPEC", "NodeSpecError", "parse_node_spec"]
