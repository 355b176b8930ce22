"""The committed *_pb2.py modules and their *_pb2.pyi stubs are what protos/generate.py makes from protos/*.proto."""

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def test_generated_modules_are_not_stale():
    pytest.importorskip("grpc_tools", reason="grpcio-tools (a test extra) provides protoc")
    result = subprocess.run([sys.executable, str(ROOT / "protos" / "generate.py"), "--check"],
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


def test_wire_format_matches_the_reference_examples():
    """Hex from ../shared/reference/tfrecord-format.md section 4."""
    from tfr_torch.format._proto import tensor_pb2

    proto = tensor_pb2.TensorProto.FromString(bytes.fromhex("0804120812020802120208022204" + "01020304"))
    assert proto.dtype == 4
    assert [d.size for d in proto.tensor_shape.dim] == [2, 2]
    assert proto.tensor_content == b"\x01\x02\x03\x04"
