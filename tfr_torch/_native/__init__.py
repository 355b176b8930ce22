"""The compiled core and the switch between it and the pure-Python reference.

`core` is the extension module `tfr_torch._native._core` when it was built and imports, else None. The format and
decode functions that own a hot loop read `core` at call time and use the pure-Python reference when it is None,
so `set_backend("python")` (or `TFR_TORCH_NATIVE=0` in the environment) takes effect at once, everywhere.
Nothing above those functions knows which backend ran.
"""

from __future__ import annotations

import os
from types import ModuleType
from typing import Literal, Optional

__all__ = ["Backend", "available", "backend", "core", "import_error", "set_backend"]

Backend = Literal["native", "python"]

core: Optional[ModuleType] = None
import_error: Optional[str] = None  # why the compiled core is not available, when it is not



def _load() -> Optional[ModuleType]:
    """The extension: the one built in the package, or the file named by TFR_TORCH_NATIVE_LIB (a build with
    AddressSanitizer / UndefinedBehaviorSanitizer, see `make test-sanitizers`)."""
    path = os.environ.get("TFR_TORCH_NATIVE_LIB")
    if not path:
        from tfr_torch._native import _core  # type: ignore[attr-defined]  # the compiled extension: no stub

        core: ModuleType = _core
        return core
    import importlib.machinery
    import importlib.util
    import sys

    loader = importlib.machinery.ExtensionFileLoader("tfr_torch._native._core", path)
    spec = importlib.util.spec_from_file_location("tfr_torch._native._core", path, loader=loader)
    if spec is None:
        raise ImportError(f"TFR_TORCH_NATIVE_LIB={path} is not a loadable extension")
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    sys.modules["tfr_torch._native._core"] = module
    return module


try:
    _compiled = _load()
except ImportError as exc:  # not built (no compiler at install time), or built for another Python
    _compiled = None
    import_error = f"{type(exc).__name__}: {exc}"


def available() -> bool:
    """Whether the compiled core was built and imports."""
    return _compiled is not None


def backend() -> Backend:
    """The backend in use: "native" (the compiled core) or "python" (the pure-Python reference)."""
    return "native" if core is not None else "python"


def set_backend(name: str) -> Backend:
    """Choose the backend: "native", "python" or "auto" (native when available). Returns the previous one.

    >>> import tfr_torch
    >>> previous = tfr_torch.set_backend("python")
    >>> tfr_torch.backend()
    'python'
    >>> _ = tfr_torch.set_backend(previous)
    """
    global core
    previous = backend()
    if name == "python":
        core = None
    elif name in ("native", "auto"):
        if _compiled is None and name == "native":
            raise RuntimeError(f"the compiled core of tfr_torch is not available ({import_error}); reinstall with a C "
                               "compiler present, or use set_backend('python')")
        core = _compiled
    else:
        raise ValueError(f'backend must be "native", "python" or "auto", got {name!r}')
    # the processes started from now on (DataLoader workers by "spawn") begin with this choice too
    os.environ["TFR_TORCH_NATIVE"] = "0" if name == "python" else "1"
    return previous


if os.environ.get("TFR_TORCH_NATIVE", "1").strip().lower() in ("0", "false", "no", "off"):
    core = None
else:
    core = _compiled
