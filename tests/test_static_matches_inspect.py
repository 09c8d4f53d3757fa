"""The static reading of a source tree gives the signatures inspect.signature gives at run time.

The fixture package imports for real here, so every expectation comes from Python itself.
"""

from __future__ import annotations

import importlib
import inspect
import sys

import pytest

from compat.signature import Signature
from compat.vllm.runtime import to_signature
from compat.vllm.static import StaticSurface
from compat.vllm.surface import BuildInfo, Found

from .conftest import FIXTURES
from .signature_views import views

NAMES = [
    "shapes.models.Base", "shapes.models.Child", "shapes.models.KwOnly", "shapes.models.NeedsInitVar",
    "shapes.models.OwnInit", "shapes.models.Plain", "shapes.models.InheritsInit", "shapes.models.WithNew",
    "shapes.models.Point", "shapes.models.Alias", "shapes.Base", "shapes.Child", "shapes.LazyThing",
    "shapes.models.Plain.method", "shapes.models.Plain.build", "shapes.models.Plain.helper",
    "shapes.pydantic_models.PydanticPlain", "shapes.pydantic_models.SchedulerLike",
    "shapes.pydantic_models.ConfigWithArgs", "shapes.pydantic_models.Model",
    "shapes.structs.Params", "shapes.structs.KwParams", "shapes.structs.Derived",
    "shapes.wrapping.decorated_keeps", "shapes.decorated_keeps", "shapes.wrapping.decorated_factory",
    "shapes.wrapping.decorated_replaced", "shapes.wrapping.decorated_registered", "shapes.wrapping.cached",
    "shapes.wrapping.Holder.method", "shapes.wrapping.instrumented", "shapes.wrapping.Instrumented",
]


@pytest.fixture(scope="module")
def surface():
    return StaticSurface(FIXTURES, BuildInfo("shapes", None, "fixture", "static", str(FIXTURES)), "shapes")


@pytest.fixture(scope="module", autouse=True)
def importable():
    sys.path.insert(0, str(FIXTURES))
    yield
    sys.path.remove(str(FIXTURES))
    for name in [m for m in sys.modules if m == "shapes" or m.startswith("shapes.")]:
        del sys.modules[name]


def runtime_signature(path: str) -> Signature:
    module_name, *attrs = path.split(".", 1)[0], *path.split(".")[1:]
    obj = importlib.import_module(module_name)
    parent = None
    for attr in attrs:
        if inspect.ismodule(obj) and not hasattr(obj, attr):
            obj = importlib.import_module(f"{obj.__name__}.{attr}")
            continue
        parent, obj = obj, getattr(obj, attr)
    sig = to_signature(inspect.signature(obj))
    if inspect.isclass(parent) and inspect.isfunction(inspect.getattr_static(parent, attrs[-1])):
        sig = sig.drop_first()  # a method as called through an instance
    return sig


@pytest.mark.parametrize("path", NAMES)
def test_static_signature_equals_runtime(surface, path):
    found = surface.lookup(path)
    assert isinstance(found, Found), found
    static = surface.signature(found)
    assert isinstance(static, Signature), static
    runtime = runtime_signature(path)
    static_view, runtime_view = views(static, runtime)
    assert static_view == runtime_view, f"\nstatic : {static}\nruntime: {runtime}"


def test_missing_name_and_lazy_table(surface):
    assert surface.lookup("shapes.models.Nope").__class__.__name__ == "Missing"
    lazy = surface.lookup("shapes.LazyThing")
    assert isinstance(lazy, Found) and lazy.path == "shapes.models.Plain"


def test_members_are_inherited_and_instance_attributes_found(surface):
    child = surface.lookup("shapes.models.InheritsInit")
    assert isinstance(surface.member(child, "method"), Found)
    assert surface.member(child, "a").kind == "instance-attribute"
    assert surface.member(child, "nope").__class__.__name__ == "Missing"
