"""Generated protobuf modules (by protos/generate.py; do not edit)."""
