"""Cheaper construction of the frozen, slotted model dataclasses (:func:`fast_init`).

A frozen dataclass's generated ``__init__`` sets each field with ``object.__setattr__``,
since its own ``__setattr__`` refuses: a generic attribute set through a Python-level call,
several hundred machine instructions a field. The simulator builds several such objects per
replayed job (a spec, its submission, its start and placement, its exit), so that adds up.

:func:`fast_init` keeps every public behaviour of the class (signature and defaults,
``__post_init__``, equality, hashing, ``repr``, immutability, pickling, ``replace``) and
builds its objects one of two ways:

* with three fields or more, ``__new__`` fills a *draft*: a plain class with the very same
  slots, whose attributes are set as cheaply as any object's, then turns it into the frozen
  class by assigning ``__class__`` (allowed because the two layouts are identical). The
  frozen class has no ``__init__`` of its own any more; it pickles and copies by calling
  itself with its field values (``__reduce__``), and it cannot be subclassed (a subclass
  would not share the draft's layout).
* with fewer, where the draft's fixed cost does not pay, ``__init__`` sets each slot through
  its member descriptor directly (about half the generic set).

A class of the first kind also has a :func:`builder`: the same construction as a plain
function, without the detour of calling a class (looking up and calling ``__new__`` from C,
then ``object.__init__``), for the few places that build such objects per replayed job.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from operator import attrgetter
from typing import Any, TypeVar

_C = TypeVar("_C", bound=type)
_T = TypeVar("_T")

#: From this many fields on, building a draft and relabelling it is cheaper than setting
#: each slot through its descriptor (measured with callgrind: about equal at two fields).
DRAFT_MIN_FIELDS = 3

#: The build function of each class built through a draft (see :func:`builder`).
_BUILDERS: dict[type, Callable[..., Any]] = {}


def fast_init(cls: _C) -> _C:
    """Give a frozen, slotted dataclass (applied above ``@dataclass``) a cheaper constructor
    with the same signature, defaults and ``__post_init__`` call."""
    fields = dataclasses.fields(cls)
    params: list[str] = []
    env: dict[str, Any] = {}
    for f in fields:
        if not f.init or f.kw_only or f.default_factory is not dataclasses.MISSING:
            raise TypeError(f"fast_init: unsupported field {cls.__name__}.{f.name}")
        if f.default is dataclasses.MISSING:
            params.append(f.name)
        else:
            env[f"_default_{f.name}"] = f.default
            params.append(f"{f.name}=_default_{f.name}")
    names = [f.name for f in fields]
    post = "    self.__post_init__()\n" if hasattr(cls, "__post_init__") else ""
    if len(fields) >= DRAFT_MIN_FIELDS:
        _draft_new(cls, names, params, post, env)
    else:
        _descriptor_init(cls, names, params, post, env)
    return cls


def _draft_new(
    cls: type, names: list[str], params: list[str], post: str, env: dict[str, Any]
) -> None:
    env["_Draft"] = type(
        f"{cls.__name__}Draft",
        (),
        {"__slots__": cls.__dict__["__slots__"], "__module__": cls.__module__},
    )
    env["_Cls"] = cls
    sets = "".join(f"    self.{name} = {name}\n" for name in names)
    body = f"    self = _Draft()\n{sets}    self.__class__ = _Cls\n{post}    return self\n"
    signature = ", ".join(params)
    new = _compile(cls, "__new__", f"def __new__(cls, {signature}):\n{body}", env)
    _BUILDERS[cls] = _compile(cls, "build", f"def build({signature}):\n{body}", env)
    values = attrgetter(*names)

    def __reduce__(self: object) -> tuple[type, tuple[object, ...]]:
        return (cls, values(self))

    def __init_subclass__(sub: type, /, **kwargs: object) -> None:
        raise TypeError(f"{cls.__name__} is final: it is built through a draft of its layout")

    __reduce__.__qualname__ = f"{cls.__qualname__}.__reduce__"
    cls.__new__ = staticmethod(new)  # type: ignore[method-assign]
    cls.__reduce__ = __reduce__  # type: ignore[assignment,method-assign]
    cls.__init_subclass__ = classmethod(__init_subclass__)  # type: ignore[assignment]
    del cls.__init__  # type: ignore[misc]  # object's: the object is complete after __new__


def builder(cls: type[_T]) -> Callable[..., _T]:
    """A function that builds ``cls`` objects from the same arguments as ``cls`` itself, about
    a fifth cheaper (``cls`` is a :func:`fast_init` class of at least
    :data:`DRAFT_MIN_FIELDS` fields; annotate the result with the arguments it is called
    with, e.g. ``Callable[[str, int], Cls]``, so that the call sites are type-checked)."""
    return _BUILDERS[cls]


def _descriptor_init(
    cls: type, names: list[str], params: list[str], post: str, env: dict[str, Any]
) -> None:
    for name in names:
        env[f"_set_{name}"] = cls.__dict__[name].__set__
    sets = "".join(f"    _set_{name}(self, {name})\n" for name in names)
    source = f"def __init__(self, {', '.join(params)}):\n{sets}{post}"
    cls.__init__ = _compile(cls, "__init__", source, env)  # type: ignore[misc]


def _compile(cls: type, name: str, source: str, env: dict[str, Any]) -> Any:
    exec(source, env)  # as dataclasses builds its own __init__
    function = env[name]
    function.__qualname__ = f"{cls.__qualname__}.{name}"
    function.__module__ = cls.__module__
    return function
