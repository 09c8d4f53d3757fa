"""The gate's safetensors header reader against the format's reference implementation, whose validation is the
spec: each hostile header is a ``HeaderError`` naming the rule it breaks, on one short line; on crafted and
generated headers the reader accepts exactly what ``safetensors.safe_open`` accepts and reads the same
tensors; and through the CLI, under a memory cap, a directory of hostile files is one finding per file."""

from __future__ import annotations

import json
import math
import os
import threading
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from compat.gate.read.safetensors_header import MAX_HEADER, HeaderError, read_header
from compat.gate.read.tensors import SAFETENSORS_DTYPES

from .hostile import run_capped

torch = pytest.importorskip("torch")
safetensors = pytest.importorskip("safetensors")
from safetensors.torch import save_file  # noqa: E402

LIBRARY_DTYPES = ["BOOL", "F4", "F6_E2M3", "F6_E3M2", "U8", "I8", "F8_E5M2", "F8_E4M3", "F8_E8M0", "F8_E4M3FNUZ",
                  "F8_E5M2FNUZ", "I16", "U16", "F16", "BF16", "I32", "U32", "F32", "C64", "F64", "I64", "U64"]
"""The dtypes safetensors 0.8 reads (its error message for an unknown one lists them)."""
GATE_UNKNOWN = [code for code in LIBRARY_DTYPES if code not in SAFETENSORS_DTYPES]
EIGHT = b"\0" * 8


def t(name: str = "t", dtype: str = '"F32"', shape: str = "[2]", offsets: str = "[0,8]", extra: str = "") -> str:
    """One tensor entry as header text, each field written as is."""
    return f'"{name}":{{"dtype":{dtype},"shape":{shape},"data_offsets":{offsets}{extra}}}'


def obj(*members: str) -> str:
    return "{" + ",".join(members) + "}"


def write(path: Path, header: str | bytes, data: bytes = b"", length: int | None = None) -> Path:
    """A safetensors file byte by byte: the 8-byte little-endian header length, the header, the data."""
    raw = header.encode() if isinstance(header, str) else header
    path.write_bytes((len(raw) if length is None else length).to_bytes(8, "little") + raw + data)
    return path


def case(name: str, header: str | bytes, data: bytes = b"", phrase: str = "", length: int | None = None):
    return pytest.param(header, data, length, phrase, id=name)


HOSTILE = [
    case("nested_100k_deep", "[" * 100_000, phrase="deeper than the 127 levels"),
    case("nested_100k_deep_in_object", '{"t":' + "[" * 100_000, phrase="deeper than the 127 levels"),
    case("nested_128_levels_in_unknown_field", obj(t(extra=',"x":' + "[" * 126 + "]" * 126)), EIGHT,
         "deeper than the 127 levels"),
    case("shape_infinity", obj(t(shape="[Infinity]")), EIGHT, "Infinity is not JSON"),
    case("shape_nan", obj(t(shape="[NaN]")), EIGHT, "NaN is not JSON"),
    case("shape_float", obj(t(shape="[2.0]")), EIGHT, "shape[0] is 2.0, not an integer"),
    case("shape_exponent", obj(t(shape="[2e0]")), EIGHT, "shape[0] is 2.0, not an integer"),
    case("shape_boolean", obj(t(shape="[true,2]")), EIGHT, "shape[0] is true, not an integer"),
    case("shape_negative", obj(t(shape="[-2]")), EIGHT, "shape[0] is -2, not an integer"),
    case("shape_minus_zero", obj(t(shape="[-0]", offsets="[0,0]")), b"", "shape[0] is -0.0, not an integer"),
    case("shape_beyond_u64", obj(t(shape=f"[{2**64},0]", offsets="[0,0]")), b"", "not an integer from 0 to 2**64-1"),
    case("offsets_strings", obj(t(offsets='["0","8"]')), EIGHT, "data_offsets[0] is the string '0'"),
    case("offsets_object", obj(t(offsets='{"begin":0,"end":8}')), EIGHT, "data_offsets is an object, not an array"),
    case("offsets_three", obj(t(offsets="[0,8,8]")), EIGHT, "data_offsets is an array of 3, not [begin, end]"),
    case("offsets_one", obj(t(offsets="[8]")), EIGHT, "data_offsets is an array of 1, not [begin, end]"),
    case("offsets_reversed", obj(t(shape="[0]", offsets="[8,0]")), EIGHT, "[8, 0] end before they begin"),
    case("dtype_array", obj(t(dtype='["F32"]')), EIGHT, "dtype is an array, not a string"),
    case("dtype_object", obj(t(dtype='{"F32":1}')), EIGHT, "dtype is an object, not a string"),
    case("dtype_object_key_repeated", obj(t(dtype='{"F32":null,"F32":null}')), EIGHT, "dtype is an object of 2 keys"),
    case("dtype_unknown", obj(t(dtype='"Q8"')), EIGHT, "unknown dtype 'Q8'"),
    case("dtype_lowercase", obj(t(dtype='"f32"')), EIGHT, "unknown dtype 'f32'"),
    case("metadata_array", obj('"__metadata__":["a"]', t()), EIGHT, "'__metadata__' is an array"),
    case("metadata_number", obj('"__metadata__":{"a":1}', t()), EIGHT, "'__metadata__' value 'a' is 1, not a string"),
    case("metadata_nested", obj('"__metadata__":{"a":{"b":"c"}}', t()), EIGHT, "value 'a' is an object"),
    case("metadata_twice", obj('"__metadata__":{}', '"__metadata__":null', t()), EIGHT, "'__metadata__' appears twice"),
    case("tensors_share_bytes", obj(t("a"), t("b")), EIGHT, "tensor 'b': data_offsets [0, 8] overlap tensor 'a'"),
    case("tensors_overlap_partly", obj(t("a"), t("b", shape="[1]", offsets="[4,8]")), EIGHT,
         "[4, 8] overlap tensor 'a', which ends at 8"),
    case("gap_between_tensors", obj(t("a", shape="[1]", offsets="[0,4]"), t("b", shape="[1]", offsets="[8,12]")),
         b"\0" * 12, "leave a gap of 4 bytes after tensor 'a'"),
    case("first_tensor_not_at_zero", obj(t(shape="[1]", offsets="[4,8]")), EIGHT, "the first tensor must begin at 0"),
    case("size_disagrees_with_shape", obj(t(shape="[3]")), EIGHT, "[3] float32 needs 12 bytes"),
    case("element_count_overflows", obj(t(shape="[4294967296,4294967296,0]", offsets="[0,0]")), b"",
         "overflows 64 bits"),
    case("shape_of_many_huge_dimensions", obj(t(shape="[" + ",".join([str(2**64 - 1)] * 100_000) + "]",
                                                offsets="[0,0]")), b"", "overflows 64 bits"),
    case("bit_count_overflows", obj(t(shape=f"[{2**62}]", offsets="[0,0]")), b"", "overflows 64 bits"),
    case("top_level_array", "[]", phrase="header is an array, not a JSON object"),
    case("top_level_string", '"x"', phrase="header is the string 'x', not a JSON object"),
    case("not_json", "!" + obj(t()), EIGHT, "not valid JSON"),
    case("utf8_byte_order_mark", "\ufeff" + obj(t()), EIGHT, "not valid JSON"),
    case("not_utf8", b'{"\xff' + t().encode()[2:] + b"}", EIGHT, "not UTF-8: invalid start byte at byte 10"),
    case("header_length_zero", b"", phrase="not valid JSON"),
    case("header_length_beyond_file", obj(t()), EIGHT, "but only", length=200),
    case("nul_padding", obj(t()) + "\0\0", EIGHT, "not valid JSON"),
    case("field_twice", obj(t(extra=',"dtype":"F32"')), EIGHT, "'dtype' appears twice"),
    case("field_missing", obj('"t":{"dtype":"F32","data_offsets":[0,8]}'), EIGHT, "no 'shape' in its entry"),
    case("entry_null", obj('"t":null'), phrase="tensor 't': entry is null"),
    case("entry_array_of_two", obj('"t":["F32",[2]]'), EIGHT, "entry is an array of 2"),
    case("lone_surrogate_in_name", obj(t(name="\\ud800")), EIGHT, "unpaired UTF-16 surrogate escape \\ud800"),
    case("lone_surrogate_in_unknown_field", obj(t(extra=',"x":"\\udc00"')), EIGHT, "unpaired UTF-16 surrogate"),
    case("float_out_of_range_in_unknown_field", obj(t(extra=',"x":1e400')), EIGHT, "number 1e400 is out of range"),
    case("integer_out_of_range_in_unknown_field", obj(t(extra=',"x":1' + "0" * 400)), EIGHT, "is out of range"),
    case("bytes_after_last_tensor", obj(t()), EIGHT + b"\0", "1 bytes follow the last tensor"),
    case("data_truncated", obj(t()), b"\0" * 4, "truncated (4 bytes missing)"),
    case("repeated_name_last_entry_wrong", obj(t(), t(shape="[1]", offsets="[0,4]")), EIGHT,
         "4 bytes follow the last tensor"),
    case("repeated_name_first_entry_malformed", obj(t(dtype='"Q8"'), t()), EIGHT, "unknown dtype 'Q8'"),
    case("megabyte_name", obj(t(name="n" * 1_000_000, dtype='"Q8"')), EIGHT, "tensor 'nnnnnnnnnn"),
]

ACCEPTED = [
    case("valid", obj(t()), EIGHT),
    case("padded_with_spaces", obj(t()) + "      ", EIGHT),
    case("padded_with_whitespace", obj(t()) + "\t\n\r ", EIGHT),
    case("leading_whitespace", "\n " + obj(t()), EIGHT),
    case("empty_header", "{}"),
    case("empty_header_padded", "{}      "),
    case("only_metadata", obj('"__metadata__":{"format":"pt"}')),
    case("metadata_null", obj('"__metadata__":null', t()), EIGHT),
    case("metadata_key_repeated", obj('"__metadata__":{"a":"b","a":"c"}', t()), EIGHT),
    case("unknown_fields", obj(t(extra=',"x":[1,{"y":null}],"x":-0,"z":1e-400,"w":1' + "0" * 308)), EIGHT),
    case("many_long_integers_in_unknown_field", obj(t(extra=',"x":[' + ",".join(["9" * 308] * 3000) + "]")), EIGHT),
    case("unknown_field_127_levels", obj(t(extra=',"x":' + "[" * 125 + "]" * 125)), EIGHT),
    case("out_of_offset_order", obj(t("b", shape="[1]", offsets="[4,8]"), t("a", shape="[1]", offsets="[0,4]")), EIGHT),
    case("empty_tensors_share_an_offset", obj(t("a", shape="[0]", offsets="[0,0]"), t("b", shape="[2,0]",
                                                                                        offsets="[0,0]"))),
    case("entry_as_array", obj('"t":["F32",[2],[0,8]]'), EIGHT),
    case("dtype_as_object", obj(t(dtype='{"F32":null}')), EIGHT),
    case("scalar", obj(t(shape="[]", offsets="[0,4]")), b"\0" * 4),
    case("zero_before_huge_dimensions", obj(t(shape="[0,4294967296,4294967296]", offsets="[0,0]"))),
    case("largest_dimension", obj(t(shape=f"[{2**64 - 1},0]", offsets="[0,0]"))),
    case("escaped_names", obj(t("a\\/b", shape="[1]", offsets="[0,4]"), t("\\u0074\\ud83d\\ude00", shape="[1]",
                                                                             offsets="[4,8]")), EIGHT),
    case("repeated_name_last_wins", obj(t(shape="[1]", offsets="[0,4]"), t()), EIGHT),
    case("repeated_name_first_entry_inconsistent", obj(t(shape="[3]", offsets="[8,0]"), t()), EIGHT),
    case("complex64_and_float8_e8m0", obj(t("c", '"C64"', "[1]", "[0,8]"), t("e", '"F8_E8M0"', "[8]", "[8,16]")),
         b"\0" * 16),
]


def gate_reads(path: Path) -> dict | str:
    """Tensor -> (shape, dtype) as the gate reads ``path``, or its HeaderError message."""
    try:
        header = read_header(path)
    except HeaderError as exc:
        return str(exc)
    return {name: (list(info.shape), info.dtype) for name, info in header.tensors.items()}


def library_reads(path: Path) -> dict | None:
    """Tensor -> (shape, dtype in the gate's names) as ``safe_open`` reads ``path``, or None if it refuses."""
    try:
        with safetensors.safe_open(str(path), framework="pt") as f:
            slices = {name: f.get_slice(name) for name in f.keys()}
    except safetensors.SafetensorError:
        return None
    return {name: (s.get_shape(), SAFETENSORS_DTYPES.get(s.get_dtype(), s.get_dtype())) for name, s in slices.items()}


def assert_agree(path: Path) -> None:
    ours, theirs = gate_reads(path), library_reads(path)
    if isinstance(ours, str) and any(f"unknown dtype '{code}'" in ours for code in GATE_UNKNOWN):
        return  # the gate may refuse a dtype it does not know
    head = path.read_bytes()[:300]
    assert isinstance(ours, dict) == (theirs is not None), (head, ours, theirs)
    if theirs is not None:
        assert ours == theirs, head


@pytest.mark.parametrize("header, data, length, phrase", HOSTILE)
def test_hostile_header_is_a_one_line_header_error(tmp_path, header, data, length, phrase):
    path = write(tmp_path / "hostile.safetensors", header, data, length)
    with pytest.raises(HeaderError) as caught:
        read_header(path)
    message = str(caught.value)
    assert phrase in message and "\n" not in message and len(message) <= 300, message


def test_header_over_the_size_limit_is_refused_unread(tmp_path):
    path = write(tmp_path / "big.safetensors", "{}", length=MAX_HEADER + 1)
    os.truncate(path, 8 + MAX_HEADER + 1)  # sparse: the length fits the file, only the limit refuses it
    with pytest.raises(HeaderError, match="over the 100000000-byte limit"):
        read_header(path)
    assert library_reads(path) is None


def test_a_fifo_in_place_of_the_file_is_refused_without_blocking(tmp_path):
    fifo = tmp_path / "swapped.safetensors"
    os.mkfifo(fifo)
    outcome = []
    reader = threading.Thread(target=lambda: outcome.append(gate_reads(fifo)), daemon=True)
    reader.start()
    reader.join(timeout=10)
    assert outcome and "not a regular file" in outcome[0]


@pytest.mark.parametrize("header, data, length, phrase", HOSTILE + ACCEPTED)
def test_gate_accepts_exactly_what_the_library_accepts(tmp_path, header, data, length, phrase):
    assert_agree(write(tmp_path / "crafted.safetensors", header, data, length))


def test_accepted_cases_are_read(tmp_path):
    """Not only agreement: the gate reads each of them (none is refused by both)."""
    for param in ACCEPTED:
        header, data, length, _ = param.values
        assert isinstance(gate_reads(write(tmp_path / "ok.safetensors", header, data, length)), dict), param.id


class Obj(list):
    """A JSON object as [key, value] pairs, so a key can repeat."""


class Raw(str):
    """JSON text written as is."""


def dump(value, comma: str = ",", colon: str = ":") -> str:
    if isinstance(value, Raw):
        return value
    if isinstance(value, Obj):
        return "{" + comma.join(json.dumps(key) + colon + dump(item, comma, colon) for key, item in value) + "}"
    if isinstance(value, list):
        return "[" + comma.join(dump(item, comma, colon) for item in value) + "]"
    return json.dumps(value)  # NaN and Infinity for non-finite floats: hostile on purpose


def base() -> Obj:
    """A valid vLLM-layout header (72 data bytes) to mutate."""
    return Obj([["__metadata__", Obj([["format", "pt"]])],
                ["token_ids", Obj([["dtype", "I64"], ["shape", [3]], ["data_offsets", [0, 24]]])],
                ["hidden_states", Obj([["dtype", "BF16"], ["shape", [3, 2, 4]], ["data_offsets", [24, 72]]])]])


SCALARS = st.one_of(st.none(), st.booleans(), st.integers(-2**66, 2**66), st.floats(), st.text(max_size=4),
                    st.sampled_from([Raw("-0"), Raw("1e400"), Raw("2.0"), Raw("1" + "0" * 400), "\ud800", "F32"]))
VALUES = st.recursive(SCALARS, lambda inner: st.one_of(
    st.lists(inner, max_size=3), st.lists(st.tuples(st.text(max_size=3), inner).map(list), max_size=3).map(Obj)),
    max_leaves=6)
SIZES = st.lists(st.one_of(st.integers(0, 80), st.sampled_from([2**32, 2**62, 2**64 - 1, 2**64, -1])), max_size=4)
DTYPES = st.one_of(st.sampled_from(LIBRARY_DTYPES + ["Q8", "f32", ""]), st.lists(
    st.tuples(st.sampled_from(LIBRARY_DTYPES), st.none()).map(list), min_size=1, max_size=2).map(Obj))
FIELDS = {"dtype": st.one_of(DTYPES, DTYPES, VALUES), "shape": st.one_of(SIZES, SIZES, VALUES),
          "data_offsets": st.one_of(st.lists(st.integers(0, 80), min_size=2, max_size=2), SIZES, VALUES)}
SAME_SIZE = {"I64": ["F64", "U64", "C64"], "BF16": ["F16", "I16", "U16"]}
RELOCATED = {"token_ids": [48, 72], "hidden_states": [0, 48]}


def mutate(data, header: Obj) -> int:
    """One random change to ``header`` in place; returns how many data bytes to add (or remove)."""
    kind = data.draw(st.sampled_from(["field", "drop", "repeat", "extra", "entry", "rename", "metadata", "swap",
                                      "reshape", "retype", "relocate", "data"]))
    entries = [pair for pair in header if isinstance(pair[1], Obj) and pair[0] != "__metadata__"]
    if kind == "data":
        return data.draw(st.integers(-2, 2))
    if kind == "metadata":
        header[0][1] = data.draw(st.one_of(st.none(), VALUES, st.lists(st.tuples(st.text(max_size=3), st.text(
            max_size=3)).map(list), max_size=3).map(Obj)))
    elif kind == "swap":
        header.reverse()
    elif kind == "relocate":  # hidden_states first in the data: still valid, listed out of offset order
        for name, fields in entries:
            for pair in fields:
                if pair[0] == "data_offsets" and name in RELOCATED:
                    pair[1] = RELOCATED[name]
    elif entries:
        mutate_entry(data, kind, data.draw(st.sampled_from(entries)))
    return 0


def mutate_entry(data, kind: str, pair: list) -> None:
    fields = pair[1]
    field = data.draw(st.sampled_from(list(FIELDS)))
    values = dict(fields)
    if kind == "field":
        for member in fields:
            if member[0] == field:
                member[1] = data.draw(FIELDS[field])
    elif kind == "drop":
        fields[:] = [member for member in fields if member[0] != field]
    elif kind == "repeat":
        fields.append([field, data.draw(FIELDS[field])])
    elif kind == "extra":
        fields.append([data.draw(st.text(max_size=4)), data.draw(VALUES)])
    elif kind == "entry":
        pair[1] = data.draw(st.one_of(st.just([values.get(key) for key in FIELDS]), VALUES))
    elif kind == "rename":
        pair[0] = data.draw(st.sampled_from(["token_ids", "hidden_states", "__metadata__", "x"]))
    elif kind == "reshape" and isinstance(values.get("shape"), list) and all(type(d) is int for d in values["shape"]):
        shape = values["shape"]
        new = data.draw(st.one_of(st.permutations(shape), st.just([math.prod(shape)])))
        fields[:] = [[key, new if key == "shape" else item] for key, item in fields]
    elif kind == "retype" and isinstance(values.get("dtype"), str) and values["dtype"] in SAME_SIZE:
        new = data.draw(st.sampled_from(SAME_SIZE[values["dtype"]]))
        fields[:] = [[key, new if key == "dtype" else item] for key, item in fields]


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.data())
def test_mutated_headers_are_accepted_exactly_when_the_library_accepts_them(tmp_path, data):
    header = base()
    extra = sum(mutate(data, header) for _ in range(data.draw(st.integers(1, 3))))
    comma, colon = data.draw(st.sampled_from([(",", ":"), (", ", ": "), ("\n,", " :\t")]))
    text = dump(header, comma, colon) + data.draw(st.sampled_from(["", "   ", "\n"]))
    if data.draw(st.booleans()):  # one character changed: JSON syntax the two parsers must judge alike
        at = data.draw(st.integers(0, len(text) - 1))
        text = text[:at] + data.draw(st.sampled_from('{}[]",:0-1e. \\u\x00\xff')) + text[at + 1:]
    assert_agree(write(tmp_path / "mutated.safetensors", text, b"\0" * max(0, 72 + extra)))


def test_hostile_files_are_one_finding_each_through_the_cli(tmp_path):
    save_file({"hidden_states": torch.randn(5, 2, 8), "token_ids": torch.arange(5)}, str(tmp_path / "good.safetensors"))
    names = []
    for param in HOSTILE:
        header, data, length, _ = param.values
        names.append(write(tmp_path / f"{param.id}.safetensors", header, data, length).name)
    run = run_capped(tmp_path)  # fails past its timeout
    assert run.returncode == 1 and run.report is not None and run.max_rss_mb < 1024, run.stderr
    findings = run.findings()
    for name in names:
        mine = [f for f in findings if f["symbol"] == name]
        assert len(mine) == 1, (name, mine)
        (finding,) = mine
        assert finding["probe"] == "readable" and finding["status"] == "broken", finding
        assert "\n" not in finding["message"] and len(finding["message"]) < 400, finding["message"]
    assert [f["status"] for f in findings if f["symbol"] == "good.safetensors"] == ["ok"]
    assert len(findings) == len(names) + 1


def test_a_header_read_before_is_checked_against_each_files_size(tmp_path):
    """Headers of the same bytes parse the same (the gate parses one once per run), but each file's size is its
    own: a copy cut short is truncated, a copy with bytes after the last tensor refused, each time."""
    whole = tmp_path / "a.safetensors"
    save_file({"x": torch.zeros(4)}, str(whole))
    raw = whole.read_bytes()
    (tmp_path / "short.safetensors").write_bytes(raw[:-4])
    (tmp_path / "long.safetensors").write_bytes(raw + bytes(4))
    for _ in range(2):
        assert read_header(whole).tensors["x"].shape == (4,)
        with pytest.raises(HeaderError, match="truncated"):
            read_header(tmp_path / "short.safetensors")
        with pytest.raises(HeaderError, match="follow the last tensor"):
            read_header(tmp_path / "long.safetensors")


def entries(count: int, **changed: str) -> list[str]:
    """``count`` one-element F32 entries ``t0000000``.. laid end to end, entry names in ``changed`` rewritten."""
    parts = {f"t{i:07d}": t(f"t{i:07d}", shape="[1]", offsets=f"[{4 * i},{4 * i + 4}]") for i in range(count)}
    parts.update(changed)
    return list(parts.values())


@pytest.mark.parametrize("count", [3, 20_000])
def test_a_repeated_name_keeps_its_last_entry_and_counts_once_in_a_header_of_any_size(tmp_path, count):
    """The walk finds a repeated name among equal name hashes (``_shadowed``): its earlier entry, which overlaps
    another tensor, leaves the layout; the name counts once, and the library reads the same."""
    last = count - 1
    header = obj(t(f"t{last:07d}", shape="[1]", offsets="[0,4]"), *entries(count))
    path = write(tmp_path / "repeated.safetensors", header, bytes(4 * count))
    assert_agree(path)
    read = read_header(path, frozenset({f"t{last:07d}"}))
    assert read.count == count and read.spans == {f"t{last:07d}": (4 * last, 4 * last + 4)}
    assert read.first == tuple(f"t{i:07d}" for i in range(min(count, 8)))


@pytest.mark.parametrize("count", [3, 20_000])
def test_a_layout_error_in_a_header_of_any_size_names_its_tensor_and_the_one_before(tmp_path, count):
    """Tensors are read again from the text only to say what is wrong (``_check_one``): a gap before the last
    tensor, and a tensor whose offsets repeat another's with a shape of other bytes (sorted after it, as the
    crate sorts: by offsets, then in the header's order), each named with its neighbour, as in a header of three."""
    last = count - 1
    gap = entries(count, **{f"t{last:07d}": t(f"t{last:07d}", shape="[1]", offsets=f"[{4 * last + 4},"
                                                                              f"{4 * last + 8}]")})
    path = write(tmp_path / "gap.safetensors", obj(*gap), bytes(4 * count + 4))
    assert_agree(path)
    with pytest.raises(HeaderError, match=f"'t{last:07d}': .* gap of 4 bytes after tensor 't{last - 1:07d}'"):
        read_header(path)
    twin = entries(count, x=t("x", shape="[2]", offsets=f"[{4 * last},{4 * last + 4}]"))
    path = write(tmp_path / "twin.safetensors", obj(*twin), bytes(4 * count))
    assert_agree(path)
    with pytest.raises(HeaderError, match=f"'x': data_offsets .* overlap tensor 't{last:07d}'"):
        read_header(path)
