"""Generated protobuf modules for the NRI protocol.

``nri_pb2``: package ``nri.pkg.api.v1alpha1`` (containerd/nri pkg/api, v0.6.1 + v0.8 fields);
``ttrpc_pb2``: the ttrpc envelope (Request, Response, Status). Both are generated from
``proto/`` by ``scripts/gen_proto.py``; do not edit them by hand.
"""
