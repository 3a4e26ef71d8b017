"""gRPC stubs generated from the node's spindle.proto by tools/generate_proto.py (do not edit)."""
