"""The base of every model class: attrs-frozen values with one shared ``__repr__``."""

from __future__ import annotations

import attrs


class Value:
    """Base of the model classes.

    The classes are ``attrs.frozen(repr=False)``: attrs would generate and compile a
    ``__repr__`` for each class at import (~0.1 ms apiece, on the path of every command); this
    one reads the fields instead and prints the same thing.
    """

    __slots__ = ()

    def __repr__(self) -> str:
        fields = ", ".join(f"{a.name}={getattr(self, a.name)!r}" for a in attrs.fields(type(self)))
        return f"{type(self).__name__}({fields})"


#: The decorator every model class uses.
value = attrs.frozen(repr=False)
