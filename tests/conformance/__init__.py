"""A differential conformance corpus: the same API requests sent to the sandbox's emulated
kube-apiserver and to a real one, their responses compared after normalisation.

- ``model``: the data a case is made of (requests, waits, watches);
- ``corpus``: the cases, by topic;
- ``client``: one HTTP endpoint (the sandbox over HTTP, the real server over TLS with a token);
- ``runner``: runs every case on one endpoint, each in a namespace of its own;
- ``normalise``: what legitimately differs between two servers, made equal; and the structural diff;
- ``differences``: the documented differences, each with its reason;
- ``report``: runs both servers and writes ``docs/sandbox-conformance.md``.
"""
