"""The classes of a build as the static reading sees them: each class read once with its resolved bases, its MRO
in C3 order, the names its own body defines and the attributes its methods set on ``self``.

``ClassReader`` answers the questions about one class; it asks the static reading (``Reading``) only to resolve
the expressions a class statement names as its bases. The helpers over a class body's statements are shared with
the type inference (``compat.vllm.type_inference``).
"""

from __future__ import annotations

import ast
from collections.abc import Iterator

from compat.location import Location
from compat.syntax import FunctionNode, is_type_checking
from compat.vllm import forwarding
from compat.vllm.definitions import ClassModel, Definition, Reading, SelfAssignments, definition
from compat.vllm.modules import target_names
from compat.vllm.surface import Found, FoundKind, Missing, Unresolved

# Bases that add no members a consumer could reach and no constructor parameters.
NEUTRAL_BASES = {
    "builtins.object", "abc.ABC", "typing.Generic", "typing.Protocol", "typing_extensions.Protocol",
    "object", "ABC", "Generic", "Protocol",
}
MAX_DEPTH = 40
"""How deep a chain of imports or of base classes is followed before the reading gives up on it (a cycle)."""


class ClassReader:
    """Class models of one build, each built once (keyed by file and line)."""

    def __init__(self, reading: Reading) -> None:
        self.reading = reading
        self._models: dict[tuple[str, int], ClassModel] = {}

    def model(self, found: Found) -> ClassModel | None:
        """The class ``found`` names, with its bases resolved (None: not a class of the build)."""
        defined = definition(found)
        if found.kind != FoundKind.CLASS or defined is None or not isinstance(defined.node, ast.ClassDef):
            return None
        info, node = defined.module, defined.node
        key = (str(info.path), node.lineno)
        model = self._models.get(key)
        if model is None:
            bases: list[Found | Unresolved | Missing] = []
            for base in node.bases:
                resolved = self.reading.resolve_expr(info, base)
                bases.append(resolved)
            model = ClassModel(found, info, node, bases)
            self._models[key] = model
        return model

    def mro(self, model: ClassModel, depth: int = 0) -> tuple[list[ClassModel], list[str]]:
        """Internal classes in C3 order, and the external bases met (by dotted path)."""
        if model.mro is not None and model.external is not None:
            return model.mro, model.external
        if depth > MAX_DEPTH:
            return [model], ["<inheritance too deep>"]
        sequences: list[list[ClassModel]] = []
        external: list[str] = []
        for base in model.bases:
            if isinstance(base, Found) and base.kind == FoundKind.CLASS:
                base_model = self.model(base)
                if base_model is not None:
                    base_mro, base_external = self.mro(base_model, depth + 1)
                    sequences.append(list(base_mro))
                    external.extend(e for e in base_external if e not in external)
                    continue
            if isinstance(base, Found):
                if base.path not in NEUTRAL_BASES and base.path not in external:
                    external.append(base.path)
            else:
                external.append(f"<unresolved base: {base.reason}>")
        sequences.append([self.model(b) for b in model.bases  # type: ignore[misc]
                          if isinstance(b, Found) and b.kind == FoundKind.CLASS and self.model(b) is not None])
        order = [model] + _c3_merge(sequences)
        model.mro, model.external = order, external
        return order, external

    def own_member(self, cls: ClassModel, name: str) -> Found | None:
        """``name`` as the body of ``cls`` itself defines it (the last definition wins), not inherited."""
        if cls.members is None:
            cls.members = _own_definitions(cls.node.body)
        known = cls.members.get(name)
        if known is None or isinstance(known, Found):
            return known
        path, loc, handle = f"{cls.found.path}.{name}", Location(cls.module.relpath, known.lineno), \
            Definition(cls.module, known, cls)
        if isinstance(known, (ast.FunctionDef, ast.AsyncFunctionDef)):
            found = Found(path, _method_kind(known), loc, handle=handle)
        else:
            kind = FoundKind.CLASS if isinstance(known, ast.ClassDef) else FoundKind.ATTRIBUTE
            found = Found(path, kind, loc, handle=handle)
        cls.members[name] = found
        return found

    def instance_attribute(self, cls: ClassModel, name: str) -> Found | None:
        """``name`` as the first ``self.<name> = ...`` of the class's own methods (or its ``__slots__``) sets it."""
        if cls.assigned is None:
            cls.assigned = SelfAssignments(_self_assignments(cls.node.body))
        first = cls.assigned.first(name)
        if first is not None:
            sub, stmt = first
            return Found(f"{cls.found.path}.{name}", FoundKind.INSTANCE_ATTRIBUTE,
                         Location(cls.module.relpath, sub.lineno), handle=Definition(cls.module, sub, cls, stmt))
        slots = self.own_member(cls, "__slots__")
        defined = definition(slots) if slots is not None else None
        value = getattr(defined.node, "value", None) if defined is not None else None
        if defined is not None and isinstance(value, (ast.Tuple, ast.List)) and any(
                isinstance(e, ast.Constant) and e.value == name for e in value.elts):
            return Found(f"{cls.found.path}.{name}", FoundKind.INSTANCE_ATTRIBUTE, slots.location,  # type: ignore[union-attr]
                         handle=Definition(cls.module, defined.node, cls))
        return None

    def forwarded_attribute(self, cls: ClassModel) -> str | None:
        """The attribute of ``self`` that the class's own ``__getattr__`` forwards every name to, if it does
        (``compat.vllm.forwarding``)."""
        own = self.own_member(cls, "__getattr__")
        defined = definition(own) if own is not None else None
        function = defined.function if defined is not None else None
        return forwarding.forwarded_attribute(function) if function is not None else None

    def member_names(self, model: ClassModel) -> set[str]:
        """Names reachable on a class: class body and instance attributes along the MRO."""
        names: set[str] = set()
        for cls in self.mro(model)[0]:
            for stmt in class_body(cls.node.body):
                if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                    names.add(stmt.name)
                elif isinstance(stmt, ast.Assign):
                    names.update(n for t in stmt.targets for n in target_names(t))
                elif isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name):
                    names.add(stmt.target.id)
                if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)) and self_name(stmt):
                    this = self_name(stmt)
                    for sub in ast.walk(stmt):
                        if (isinstance(sub, ast.Attribute) and isinstance(sub.ctx, ast.Store)
                                and isinstance(sub.value, ast.Name) and sub.value.id == this):
                            names.add(sub.attr)
        return names


def class_body(body: list[ast.stmt]) -> list[ast.stmt]:
    """Statements of a class body, looking into ``if``/``try`` blocks (not TYPE_CHECKING)."""
    out: list[ast.stmt] = []
    for stmt in body:
        if isinstance(stmt, ast.If):
            if not is_type_checking(stmt.test):
                out.extend(class_body(stmt.body))
            out.extend(class_body(stmt.orelse))
        elif isinstance(stmt, ast.Try):
            out.extend(class_body(stmt.body + [s for h in stmt.handlers for s in h.body] + stmt.orelse))
        else:
            out.append(stmt)
    return out


def self_name(node: ast.FunctionDef | ast.AsyncFunctionDef) -> str | None:
    """The name a method calls its instance (its first parameter)."""
    params = node.args.posonlyargs + node.args.args
    return params[0].arg if params else None


def flatten(target: ast.expr) -> list[ast.expr]:
    """The names an assignment target binds, out of tuples, lists and starred targets."""
    if isinstance(target, (ast.Tuple, ast.List)):
        return [t for e in target.elts for t in flatten(e)]
    if isinstance(target, ast.Starred):
        return flatten(target.value)
    return [target]


def _own_definitions(body: list[ast.stmt]) -> dict[str, Found | ast.stmt]:
    """Each name a class body defines (a def, a class, an assignment, an annotation), with its last definition."""
    defined: dict[str, Found | ast.stmt] = {}
    for stmt in class_body(body):
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            defined[stmt.name] = stmt
        elif isinstance(stmt, ast.Assign):
            defined.update((n, stmt) for t in stmt.targets for n in target_names(t))
        elif isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name):
            defined[stmt.target.id] = stmt
    return defined


def _self_assignments(body: list[ast.stmt]) -> Iterator[tuple[str, ast.stmt, FunctionNode]]:
    """(name, statement, method) for each ``self.<name>`` a method of a class body assigns, in order."""
    for stmt in class_body(body):
        if not isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        this = self_name(stmt)
        if this is None:
            continue
        for sub in ast.walk(stmt):
            targets: list[ast.expr] = []
            if isinstance(sub, ast.Assign):
                targets = [t for target in sub.targets for t in flatten(target)]
            elif isinstance(sub, (ast.AnnAssign, ast.AugAssign)):
                targets = [sub.target]
            for target in targets:
                if isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name) \
                        and target.value.id == this:
                    yield target.attr, sub, stmt  # type: ignore[misc]


def _method_kind(node: ast.FunctionDef | ast.AsyncFunctionDef) -> FoundKind:
    for deco in node.decorator_list:
        name = ast.unparse(deco.func if isinstance(deco, ast.Call) else deco).rsplit(".", 1)[-1]
        if name in ("property", "cached_property", "cached_property_with_name"):
            return FoundKind.PROPERTY
        if name == "classmethod":
            return FoundKind.CLASSMETHOD
        if name == "staticmethod":
            return FoundKind.STATICMETHOD
        if name in ("setter", "getter", "deleter"):
            return FoundKind.PROPERTY
    return FoundKind.METHOD


def _c3_merge(sequences: list[list[ClassModel]]) -> list[ClassModel]:
    result: list[ClassModel] = []
    seqs = [list(s) for s in sequences if s]
    while seqs:
        for seq in seqs:
            head = seq[0]
            if not any(head in other[1:] for other in seqs):
                break
        else:
            # Inconsistent hierarchy: fall back to depth-first order without duplicates.
            for seq in seqs:
                for item in seq:
                    if item not in result:
                        result.append(item)
            return result
        result.append(head)
        seqs = [[c for c in s if c is not head] for s in seqs]
        seqs = [s for s in seqs if s]
    return result
