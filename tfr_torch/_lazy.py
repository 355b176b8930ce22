"""Names of a package imported from their modules on first access (PEP 562), so that importing the package stays
cheap: tfr_torch itself, tfr_torch.tfds and tfr_torch.rlds use it."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping, MutableMapping
from typing import Any

__all__ = ["lazy_exports"]


def lazy_exports(package: str, exports: Mapping[str, str], namespace: MutableMapping[str, Any],
                 subpackages: frozenset[str] = frozenset()) -> Callable[[str], Any]:
    """The module `__getattr__` of `package`: a name of `exports` ({name: module}) is imported from its module and
    kept in `namespace` (the package's globals()), a name of `subpackages` is imported as `package.name`."""

    def __getattr__(name: str) -> Any:
        if name in subpackages:
            return importlib.import_module(f"{package}.{name}")  # which also sets it as the package's attribute
        module = exports.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        namespace[name] = value
        return value

    return __getattr__
