from hypothesis import given
from hypothesis import strategies as st

from compat.signature import CallShape, Parameter, ParamKind, Signature

P = ParamKind


def sig(*params: Parameter) -> Signature:
    return Signature(tuple(params))


def test_removed_keyword_is_reported():
    s = sig(Parameter("a", P.POSITIONAL_OR_KEYWORD), Parameter("b", P.POSITIONAL_OR_KEYWORD))
    problems = s.bind(CallShape(keywords=("a", "b", "gone")), "f()")
    assert [p.code for p in problems] == ["unexpected-keyword"]
    assert "gone" in problems[0].message


def test_new_required_parameter_is_reported():
    s = sig(Parameter("a", P.POSITIONAL_OR_KEYWORD), Parameter("block_size", P.POSITIONAL_OR_KEYWORD))
    problems = s.bind(CallShape(keywords=("a",)), "Scheduler()")
    assert [(p.code, p.parameter) for p in problems] == [("missing-required", "block_size")]


def test_keyword_only_passed_positionally_is_too_many_positional():
    s = sig(Parameter("a", P.POSITIONAL_OR_KEYWORD), Parameter("b", P.KEYWORD_ONLY, True, "1"))
    assert [p.code for p in s.bind(CallShape(positional=2))] == ["too-many-positional"]


def test_positional_only_by_keyword():
    s = sig(Parameter("a", P.POSITIONAL_ONLY))
    assert [p.code for p in s.bind(CallShape(keywords=("a",)))] == ["positional-only-by-keyword", "missing-required"]


def test_star_kwargs_in_call_may_supply_required_keywords():
    s = sig(Parameter("a", P.KEYWORD_ONLY))
    assert s.bind(CallShape(star_kwargs=True)) == []


def test_var_keyword_accepts_any_keyword():
    s = sig(Parameter("kwargs", P.VAR_KEYWORD))
    assert s.bind(CallShape(keywords=("anything",))) == []


def test_render_matches_inspect_style():
    s = sig(Parameter("a", P.POSITIONAL_ONLY), Parameter("b", P.POSITIONAL_OR_KEYWORD, True, "1"),
            Parameter("c", P.KEYWORD_ONLY), Parameter("kw", P.VAR_KEYWORD))
    assert s.render() == "(a, /, b=1, *, c, **kw)"


def test_positional_targets_show_shifts():
    old = sig(Parameter("x", P.POSITIONAL_OR_KEYWORD), Parameter("y", P.POSITIONAL_OR_KEYWORD))
    new = sig(Parameter("x", P.POSITIONAL_OR_KEYWORD), Parameter("inserted", P.POSITIONAL_OR_KEYWORD, True, "0"),
              Parameter("y", P.POSITIONAL_OR_KEYWORD))
    call = CallShape(positional=2)
    assert old.positional_targets(call) == ("x", "y")
    assert new.positional_targets(call) == ("x", "inserted")


names = st.sampled_from(["a", "b", "c", "d", "e"])


@st.composite
def signatures(draw):
    chosen = draw(st.lists(names, unique=True, max_size=5))
    params = []
    seen_default = False
    for name in chosen:
        kind = draw(st.sampled_from([P.POSITIONAL_OR_KEYWORD, P.KEYWORD_ONLY]))
        default = draw(st.booleans()) if kind is P.KEYWORD_ONLY or not seen_default else True
        seen_default = seen_default or (kind is P.POSITIONAL_OR_KEYWORD and default)
        params.append(Parameter(name, kind, default, "0" if default else None))
    params.sort(key=lambda p: p.kind is P.KEYWORD_ONLY)
    return Signature(tuple(params))


@given(signatures(), st.integers(0, 5), st.lists(names, unique=True, max_size=5))
def test_bind_agrees_with_python(signature, positional, keywords):
    """Our binding verdict equals Python's own, for calls made of plain positionals and keywords."""
    import inspect

    params = [inspect.Parameter(p.name, getattr(inspect.Parameter, p.kind.value),
                                default=0 if p.has_default else inspect.Parameter.empty)
              for p in signature.parameters]
    real = inspect.Signature(params)
    args = list(range(positional))
    kwargs = {k: 1 for k in keywords}
    try:
        real.bind(*args, **kwargs)
        python_ok = True
    except TypeError:
        python_ok = False
    ours = signature.bind(CallShape(positional=positional, keywords=tuple(keywords)))
    assert (ours == []) == python_ok
