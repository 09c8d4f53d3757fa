"""What a call in a decoder layer's code reaches, for ``compat.facts.evaluator``: a submodule's class (and which
of its methods runs), a vLLM IR op's native implementation, and what is known of tensor methods and ``torch``
functions that receive the stream.
"""

from __future__ import annotations

import ast
import weakref

from compat.syntax import FunctionNode
from compat.vllm.definitions import ClassModel, definition
from compat.vllm.static import StaticSurface
from compat.vllm.surface import Found, FoundKind

CUSTOM_OP = "vllm.model_executor.custom_op.CustomOp"
"""``CustomOp.forward`` dispatches to ``forward_native``, ``forward_cuda``, ``forward_cpu``...; ``forward_native``
is "the PyTorch-native implementation equivalent to forward()" (its docstring), the reference every platform's
kernel is tested against, so it is what a custom op computes."""
IR_REGISTER = "register_op"
"""vLLM IR's decorator (``vllm/ir/op.py``): "f: the native implementation of the op"; ``op.maybe_inplace`` is the
same op allowed to write into its inputs, which changes where the values are, not what they are."""
IR_OVERLOADS = frozenset({"maybe_inplace"})

VIEWS = frozenset({"view", "reshape", "view_as", "reshape_as", "flatten", "squeeze", "unsqueeze"})
"""Tensor methods whose result is the same values (a view may share the object's storage)."""
COPIES = frozenset({"contiguous", "clone", "detach"})
CASTS = frozenset({"to", "float", "half", "bfloat16", "double", "type", "type_as"})
CAST_DTYPES = {"float": "float32", "half": "float16", "bfloat16": "bfloat16", "double": "float64"}
NONLINEAR_METHODS = frozenset({"pow", "mean", "sum", "var", "std", "norm", "square", "sqrt", "rsqrt", "exp", "abs",
                               "amax", "amin", "max", "min", "softmax", "sigmoid", "tanh", "relu", "neg", "reciprocal",
                               "log", "cumsum", "size", "dim", "numel"})
"""Tensor methods that make a new value from the stream without adding it back (reductions, element-wise maps)."""
NONLINEAR_TORCH = frozenset({"rsqrt", "sqrt", "exp", "tanh", "sigmoid", "softmax", "mean", "pow", "square", "var",
                             "norm", "layer_norm", "rms_norm", "group_norm", "silu", "gelu", "relu", "matmul", "mm",
                             "bmm", "einsum", "linear", "normalize", "abs", "reciprocal", "log"})
"""``torch`` and ``torch.nn.functional`` functions of that kind."""
DTYPE_NAMES = {"float32": "float32", "float": "float32", "float16": "float16", "half": "float16",
               "bfloat16": "bfloat16", "float64": "float64", "double": "float64"}
PROJECTIONS = frozenset({"LinearBase", "FusedMoE", "RoutedExperts", "VocabParallelEmbedding"})
"""vLLM's layers (``vllm/model_executor/layers/``) that compute a new value from their input: a linear map with the
layer's weight (``LinearBase``: every parallel and replicated linear layer), a weighted sum of experts' MLPs
(``FusedMoE``, ``RoutedExperts`` from 0.32), an embedding: what they return is not their input, whichever kernel
computes it (their ``forward`` dispatches to a quantization method's kernel, which cannot be read)."""
TORCH_NEW = frozenset({"LayerNorm", "RMSNorm", "GroupNorm", "Linear", "Embedding", "SiLU", "GELU", "ReLU", "Tanh",
                       "Sigmoid", "Softmax", "Conv1d"})
"""``torch.nn`` modules whose output is a new value (a norm, a projection, an activation)."""
TORCH_SAME = frozenset({"Identity", "Dropout"})
"""``torch.nn`` modules that return their input (``Dropout`` at inference)."""
HARMLESS_DECORATORS = frozenset({"staticmethod", "classmethod", "compile", "no_grad", "inference_mode", "cache",
                                 "lru_cache", "wraps", "override", IR_REGISTER})
"""Decorators that leave what a def computes as written (``torch.compile`` compiles the same code)."""


def decorator_problem(node: FunctionNode, path: str) -> str:
    """Why a def's decorators keep it from being read as written ('' when none does)."""
    for deco in node.decorator_list:
        text = ast.unparse(deco.func if isinstance(deco, ast.Call) else deco)
        if text.rsplit(".", 1)[-1] in HARMLESS_DECORATORS or text.startswith("torch."):
            continue
        return f"{path} is decorated with {text}, which may change what it computes"
    return ""


def is_ir_op(found: Found) -> bool:
    defined = definition(found)
    return defined is not None and defined.function is not None and any(
        ast.unparse(d.func if isinstance(d, ast.Call) else d).rsplit(".", 1)[-1] == IR_REGISTER
        for d in defined.function.decorator_list)


def is_projection(surface: StaticSurface, cls: Found) -> bool:
    model = surface.class_model(cls)
    if model is None:
        return False
    return any(c.node.name in PROJECTIONS and c.found.path.startswith("vllm.model_executor.layers.")
               for c in surface.mro(model)[0])


def forward_of(surface: StaticSurface, cls: Found) -> str:
    """The method a call of a module runs: ``forward``, or a custom op's ``forward_native``."""
    model = surface.class_model(cls)
    if model is None:
        return "forward"
    chain, _ = surface.mro(model)
    if any(c.found.path == CUSTOM_OP for c in chain) and isinstance(surface.member(cls, "forward_native"), Found):
        return "forward_native"
    return "forward"


_SUBMODULES: weakref.WeakKeyDictionary[StaticSurface, dict[tuple[str, str], list[Found]]] = \
    weakref.WeakKeyDictionary()


def submodule_classes(surface: StaticSurface, cls: Found, attr: str) -> list[Found]:
    """``_submodule_classes``, once per build, class and attribute."""
    memo = _SUBMODULES.setdefault(surface, {})
    key = (cls.path, attr)
    if key not in memo:
        memo[key] = _submodule_classes(surface, cls, attr)
    return memo[key]


def _submodule_classes(surface: StaticSurface, cls: Found, attr: str) -> list[Found]:
    """The classes ``self.<attr>`` may be built as in ``__init__`` along the MRO: ``RMSNorm(...)``, either side of
    an ``if``, or a class a local name holds (``norm_cls, eps = select_norm_impl(config)``: every class that
    function returns there). A class of another library is an ``EXTERNAL`` Found (``torch.nn.LayerNorm``)."""
    model = surface.class_model(cls)
    if model is None:
        return []
    for owner in surface.mro(model)[0]:
        init = surface.own_member(owner, "__init__")
        defined = definition(init) if init is not None else None
        if defined is None or defined.function is None:
            continue
        values = [node.value for node in ast.walk(defined.function)
                  if isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None
                  and any(_is_self_attr(t, attr) for t in (node.targets if isinstance(node, ast.Assign)
                                                           else [node.target]))]
        if values:
            found: list[Found] = []
            for value in values:
                found += _classes_of(surface, value, defined.function, owner)
            return list({f.path: f for f in found}.values())
    return []


def _is_self_attr(target: ast.expr, attr: str) -> bool:
    return isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name) and target.value.id == "self" \
        and target.attr == attr


def _classes_of(surface: StaticSurface, value: ast.expr, init: FunctionNode, owner: ClassModel,
                depth: int = 0) -> list[Found]:
    if depth > 3:
        return []
    if isinstance(value, ast.IfExp):
        return _classes_of(surface, value.body, init, owner, depth + 1) + _classes_of(surface, value.orelse, init,
                                                                                      owner, depth + 1)
    if not isinstance(value, ast.Call):
        return []
    func = value.func
    if isinstance(func, ast.Name):
        local = [n for n in ast.walk(init) if isinstance(n, ast.Assign)
                 and any(func.id in {e.id for e in ast.walk(t) if isinstance(e, ast.Name)} for t in n.targets)]
        if local:
            out: list[Found] = []
            for assign in local:
                target = assign.targets[0]
                position = next((i for i, e in enumerate(target.elts) if isinstance(e, ast.Name)
                                 and e.id == func.id), None) if isinstance(target, ast.Tuple) else None
                out += _chosen_classes(surface, assign.value, position, owner)
            return out
    found = surface.resolve_expr(owner.module, func)
    return [found] if isinstance(found, Found) and found.kind in (FoundKind.CLASS, FoundKind.EXTERNAL) else []


def _chosen_classes(surface: StaticSurface, value: ast.expr, position: int | None, owner: ClassModel) -> list[Found]:
    """The classes a local name is bound to: a class, or what a function of the build returns (at ``position`` of
    the tuple it returns)."""
    found = surface.resolve_expr(owner.module, value)
    if isinstance(found, Found) and found.kind == FoundKind.CLASS:
        return [found]
    if not isinstance(value, ast.Call):
        return []
    called = surface.resolve_expr(owner.module, value.func)
    defined = definition(called) if isinstance(called, Found) else None
    if defined is None or defined.function is None:
        return []
    out: list[Found] = []
    for node in ast.walk(defined.function):
        if isinstance(node, ast.Return) and node.value is not None:
            chosen = node.value
            if position is not None:
                if not isinstance(chosen, ast.Tuple) or position >= len(chosen.elts):
                    return []  # a return of another shape: the classes cannot all be read
                chosen = chosen.elts[position]
            got = surface.resolve_expr(defined.module, chosen)
            if not (isinstance(got, Found) and got.kind == FoundKind.CLASS):
                return []
            out.append(got)
    return out
