"""The layering rules of ../shared/STYLE.md, checked in fresh interpreters."""

import subprocess
import sys
from pathlib import Path

import pytest


def _run(code: str) -> str:
    return subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True).stdout.strip()


def test_format_layer_does_not_import_torch():
    code = (
        "import sys, tfr_torch, tfr_torch.format, tfr_torch.format.example, tfr_torch.format.index, "
        "tfr_torch.format.tensor, tfr_torch.format.reader, tfr_torch.format.writer\n"
        "tfr_torch.encode_example({'a': 1}); tfr_torch.read_records; tfr_torch.TFRecordWriter\n"
        "print('torch' in sys.modules)"
    )
    assert _run(code) == "False"


def test_no_format_module_imports_torch():
    code = (
        "import importlib, pkgutil, sys, tfr_torch.format\n"
        "names = [m.name for m in pkgutil.walk_packages(tfr_torch.format.__path__, 'tfr_torch.format.')]\n"
        "for name in names: importlib.import_module(name)\n"
        "print(len(names) > 20, 'torch' in sys.modules)"
    )
    assert _run(code) == "True False"


def test_shard_set_layout_does_not_import_torch():
    code = (
        "import sys, tfr_torch.format.shardset as layout, tfr_torch.tfds.metadata, tfr_torch.tfds.write\n"
        "layout.shard_name('a', 'train', 0, 1); layout.parse_shard_name('a-train.tfrecord-00000-of-00001')\n"
        "layout.fill_template(layout.TFDS_TEMPLATE, 'a', 'train', 'tfrecord', 0, 1); layout.tfds_num_bytes([(1, 20)])\n"
        "print('torch' in sys.modules)"
    )
    assert _run(code) == "False"


def test_lower_layers_do_not_import_tools_or_integrations():
    """format -> decode -> data -> tools: importing the datasets and decoders loads no converter, CLI, image codec,
    TFDS or Ray module."""
    code = (
        "import sys, tfr_torch.tensors, tfr_torch.decode.plan, tfr_torch.decode.sidecar, tfr_torch.decode.dtypes, "
        "tfr_torch.data.dataset, tfr_torch.data.indexed, tfr_torch.data.indexes, tfr_torch.data.cache\n"
        "print(sorted({m.split('.')[1] for m in sys.modules if m.startswith('tfr_torch.') and m.count('.') > 1}))"
    )
    assert _run(code) == "['_native', 'data', 'decode', 'format']"


def test_cli_does_not_import_torch_for_format_commands():
    assert _run("import sys, tfr_torch.tools.cli; print('torch' in sys.modules)") == "False"


def test_torch_edge_loads_torch_on_first_use():
    assert _run("import sys, tfr_torch; tfr_torch.parse_tensor; print('torch' in sys.modules)") == "True"


def test_unknown_attribute_is_an_attribute_error():
    import tfr_torch

    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        tfr_torch.nope  # noqa: B018


def test_public_names_resolve():
    import tfr_torch

    for name in tfr_torch.__all__:
        assert getattr(tfr_torch, name) is not None, name


def test_coexists_with_tensorflows_descriptors_in_the_default_pool():
    """TensorFlow registers tensorflow.Example etc. in protobuf's default pool; ours live in a private pool."""
    code = (
        "from google.protobuf import descriptor_pb2, descriptor_pool\n"
        "import tfr_torch\n"
        "from tfr_torch.format._proto import example_pb2, feature_pb2\n"
        "for mod in (feature_pb2, example_pb2):\n"
        "    fd = descriptor_pb2.FileDescriptorProto(); mod.DESCRIPTOR.CopyToProto(fd)\n"
        "    descriptor_pool.Default().Add(fd)\n"
        "print(tfr_torch.decode_example(tfr_torch.encode_example({'x': 1}))['x'].tolist())"
    )
    assert _run(code) == "[1]"


def test_subpackages_load_on_first_access_only():
    """`import tfr_torch` imports none of its subpackages; `tfr_torch.tfds` (and the other families) import on
    first access, without `import tfr_torch.tfds`."""
    families = ["tfds", "images", "tools", "data", "decode", "format"]
    code = (
        "import sys, tfr_torch\n"
        f"print(sorted(f for f in {families!r} if 'tfr_torch.' + f in sys.modules), 'torch' in sys.modules)\n"
        "info = tfr_torch.tfds.read_info('tests/data/tfds/rlds/rlds_golden/1.0.0')\n"
        "print(info.name, 'torch' in sys.modules, type(tfr_torch.tfds.TFDSDecoder).__name__)\n"
        f"print([getattr(tfr_torch, f).__name__ for f in {families!r}])\n"
    )
    lines = _run(code).splitlines()
    assert lines[0] == "[] False"
    assert lines[1] == "rlds_golden False type"  # the metadata never loads torch
    assert lines[2] == str([f"tfr_torch.{f}" for f in families])
    try:
        import ray.data  # noqa: F401
    except ImportError:
        message = _run("import tfr_torch\ntry:\n    tfr_torch.ray\nexcept ImportError as exc:\n    print(exc)")
        assert message == "tfr_torch.ray needs Ray Data: pip install 'tfr_torch[ray]' (or 'ray[data]')"
    else:
        assert _run("import sys, tfr_torch; print('tfr_torch.ray' in sys.modules, tfr_torch.ray.__name__)") == \
            "False tfr_torch.ray"


def test_unknown_attribute_is_still_an_attribute_error():
    import tfr_torch

    with pytest.raises(AttributeError) as info:
        tfr_torch.tfdss  # noqa: B018
    assert str(info.value) == "module 'tfr_torch' has no attribute 'tfdss'"
    assert not hasattr(tfr_torch, "_private")


def test_c_kernels_touch_no_python_objects_and_bindings_are_apart():
    """The compiled core's layering (STYLE.md): the kernels (every .c file other than module.c and bind_*.c) include
    neither Python.h nor bindings.h, so they run without the GIL; every binding file is compiled (setup.py SOURCES);
    module.c holds only the method table and the module's init, each binding file one concern, none past ~400
    lines."""
    import re

    src = Path(__file__).resolve().parents[1] / "tfr_torch" / "_native" / "src"
    setup_text = (src.parents[2] / "setup.py").read_text()
    sources = set(re.findall(r'"([a-z_0-9]+\.c)"', setup_text))
    bindings = {p.name for p in src.glob("bind_*.c")} | {"module.c"}
    assert len(bindings) > 2
    for path in sorted(src.glob("*.c")):
        text = path.read_text()
        assert path.name in sources, f"{path.name} is not in setup.py's SOURCES"
        includes = set(re.findall(r'#include [<"]([^>"]+)[>"]', text))
        if path.name in bindings:
            assert "Python.h" in includes, path.name
            assert len(text.splitlines()) <= 400, f"{path.name}: {len(text.splitlines())} lines"
        else:
            assert not includes & {"Python.h", "bindings.h"}, f"kernel {path.name} includes {includes}"
            assert "PyObject" not in text, f"kernel {path.name} names PyObject"
    module = (src / "module.c").read_text()
    assert "Py_BEGIN_ALLOW_THREADS" not in module  # no kernel call in module.c: the bindings make them
