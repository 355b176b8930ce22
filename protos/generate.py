"""Regenerate tfr_torch/format/_proto/*_pb2.py and their *_pb2.pyi type stubs from the .proto files in protos/.

Run `python protos/generate.py` (needs grpcio-tools, which bundles protoc). `--check` exits 1
when the committed modules or stubs differ from what the .proto files produce. The stubs (protoc's
`--pyi_out`) let mypy check the code that builds and reads these messages.

Two edits are made to protoc's output, both so that tfr_torch can live in one process with TensorFlow:
- the descriptors go into tfr_torch's own descriptor pool, not protobuf's default pool, so that
  TensorFlow's copies of `tensorflow.Example` etc. never collide with ours;
- imports between the generated modules point at `tfr_torch.format._proto`, and the runtime
  version check (which would tie the package to one protobuf release) is removed; the
  descriptor-builder API these modules call exists in every protobuf runtime tfr_torch supports.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PROTO_ROOT = ROOT / "protos"
OUT = ROOT / "tfr_torch" / "format" / "_proto"
PROTOS = [
    "tensorflow/core/example/feature.proto",
    "tensorflow/core/example/example.proto",
    "tensorflow/core/framework/types.proto",
    "tensorflow/core/framework/tensor_shape.proto",
    "tensorflow/core/framework/tensor.proto",
    "tfr_torch/raw_example.proto",
]

_VERSION_CHECK = re.compile(
    r"^from google\.protobuf import runtime_version as _runtime_version\n", re.M
)
_VERSION_CALL = re.compile(r"^_runtime_version\.ValidateProtobufRuntimeVersion\(\n(?:    .*\n)*?\)\n", re.M)
_VERSION_COMMENT = re.compile(r"^# Protobuf Python Version: .*\n", re.M)
_CROSS_IMPORT = re.compile(r"^from tensorflow\.core\.(?:example|framework) import (\w+_pb2) as (\w+)$", re.M)


def _postprocess(source: str) -> str:
    source = _VERSION_CHECK.sub("", source)
    source = _VERSION_CALL.sub("", source)
    source = _VERSION_COMMENT.sub("", source)
    source = _CROSS_IMPORT.sub(r"from tfr_torch.format._proto import \1 as \2", source)
    source = source.replace(
        "from google.protobuf import descriptor_pool as _descriptor_pool\n",
        "from tfr_torch.format._proto._pool import POOL as _POOL\n",
    )
    source = source.replace("_descriptor_pool.Default()", "_POOL")
    module = r"'(?:tensorflow\.core\.(?:example|framework)|tfr_torch)\.(\w+_pb2)'"
    source = re.sub(module, r"'tfr_torch.format._proto.\1'", source)
    if "_descriptor_pool" in source or "tensorflow.core" in source.replace("# source: tensorflow/core", ""):
        raise RuntimeError("unexpected protoc output: post-processing left a reference to the default pool")
    return source


def _postprocess_stub(source: str) -> str:
    source = _CROSS_IMPORT.sub(r"from tfr_torch.format._proto import \1 as \2", source)
    if "tensorflow.core" in source:
        raise RuntimeError("unexpected protoc output: post-processing left an import of tensorflow.core in a stub")
    return source


def generate() -> dict[str, str]:
    """Return {file name: source} for every generated module (`*_pb2.py`) and its stub (`*_pb2.pyi`)."""
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [sys.executable, "-m", "grpc_tools.protoc", f"-I{PROTO_ROOT}", f"--python_out={tmp}",
               f"--pyi_out={tmp}", *PROTOS]
        subprocess.run(cmd, check=True, cwd=ROOT)
        out = {}
        for proto in PROTOS:
            generated = Path(tmp) / proto.replace(".proto", "_pb2.py")
            out[generated.name] = _postprocess(generated.read_text())
            stub = generated.with_suffix(".pyi")
            out[stub.name] = _postprocess_stub(stub.read_text())
        return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only compare with the committed modules")
    args = parser.parse_args(argv)
    stale = []
    for name, source in generate().items():
        target = OUT / name
        if args.check:
            if not target.exists() or target.read_text() != source:
                stale.append(str(target.relative_to(ROOT)))
        else:
            target.write_text(source)
    if stale:
        print("stale generated modules or stubs (run `python protos/generate.py`): " + ", ".join(stale),
              file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
