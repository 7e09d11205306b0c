"""Named plug-ins (rewriters, teachers): one registry per kind that rejects duplicate names.

A plug-in is one module in its package that decorates its class with ``@REGISTRY.register``; the
registry imports every module of the package the first time it is asked for names, so adding a
plug-in never means editing another file.
"""

from __future__ import annotations

import importlib
import pkgutil
from typing import Generic, TypeVar

from tour_pyserini.errors import UserError

T = TypeVar("T", bound=type)


class Registry(Generic[T]):
    """Classes of one kind by name; the name is the class attribute ``attribute`` (e.g. ``name``)."""

    def __init__(self, what: str, package: str, attribute: str = "name"):
        self.what, self.package, self.attribute = what, package, attribute
        self._classes: dict[str, T] = {}

    def register(self, cls: T) -> T:
        """Class decorator; a second, different class under the same name is an error."""
        name = getattr(cls, self.attribute)
        known = self._classes.get(name)
        if known is not None and (known.__module__, known.__qualname__) != (cls.__module__, cls.__qualname__):
            raise ValueError(f"{self.what} {name!r} is registered twice: {known.__qualname__} and {cls.__qualname__}")
        self._classes[name] = cls
        return cls

    def all(self) -> dict[str, T]:
        """Every registered class by name, after importing every module of the package."""
        package = importlib.import_module(self.package)
        for module in pkgutil.iter_modules(package.__path__):
            importlib.import_module(f"{self.package}.{module.name}")
        return dict(sorted(self._classes.items()))

    def get(self, name: str) -> T:
        classes = self.all()
        if name not in classes:
            raise UserError(f"unknown {self.what} {name!r}; choose one of: {', '.join(classes)}")
        return classes[name]
