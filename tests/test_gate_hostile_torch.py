"""The gate on hostile and unusual ``torch.save`` files (issue "the gate under attack"): zip bombs, directories
that lie about sizes, pickles that share containers to multiply the work, and a deflated archive that
``torch.load`` reads and the gate must read too. Each hostile file is built here byte by byte (``zipfile``,
``pickle``, ``struct``; real ``torch.save`` output where it starts from one), run through the command line under
a memory cap and a timeout (``tests/hostile.py``) next to a good file, and must end as one one-line finding
while the good file gets its complete report; the reader's bounds are also tested on small fixtures.
"""

from __future__ import annotations

import collections
import io
import pickle
import pickletools
import struct
import tracemalloc
import zipfile
import zlib
from pathlib import Path

import pytest

from compat.gate import value_stats
from compat.gate.read import torch_header, torch_load, zip_archive
from compat.gate.read.files import read_file
from compat.gate.read.tensor_data import open_file
from compat.gate.read.torch_header import OversizedPickle, SharedContainer, TensorStub, read_archive, refuse_shared
from compat.gate.read.zip_archive import DirectoryMismatch, ZipBomb, read_directory

from .gate_files import layered, write_speculators
from .hostile import run_capped

torch = pytest.importorskip("torch")

H = 64
MiB = 1 << 20
ZEROS = bytes(MiB)


# -- building archives byte by byte -------------------------------------------------------------------------------

class Storage:
    """Pickles as torch.save's persistent id of a storage: ``("storage", <StorageClass>, key, "cpu", numel)``."""

    def __init__(self, key: str, cls, numel: int) -> None:
        self.key, self.cls, self.numel = key, cls, numel


class Tensor:
    """Pickles as torch.save pickles a contiguous tensor: ``_rebuild_tensor_v2(storage, offset, size, stride, ...)``."""

    def __init__(self, storage: Storage, shape: tuple[int, ...]) -> None:
        self.storage, self.shape = storage, shape

    def __reduce__(self):
        stride = tuple(int(torch.tensor(self.shape[i + 1:]).prod()) for i in range(len(self.shape)))
        return torch._utils._rebuild_tensor_v2, (self.storage, 0, self.shape, stride, False, collections.OrderedDict())


class _Pickler(pickle.Pickler):
    def persistent_id(self, obj):
        return ("storage", obj.cls, obj.key, "cpu", obj.numel) if isinstance(obj, Storage) else None


def pickled(obj) -> bytes:
    buffer = io.BytesIO()
    _Pickler(buffer, protocol=2).dump(obj)
    return buffer.getvalue()


def stored(name: str, data: bytes) -> tuple:
    return name, 0, data, len(data), zlib.crc32(data)


def deflated(name: str, data: bytes) -> tuple:
    c = zlib.compressobj(6, zlib.DEFLATED, -15)
    return name, 8, c.compress(data) + c.flush(), len(data), zlib.crc32(data)


def deflated_zeros(name: str, mib: int, head: bytes = b"") -> tuple:
    """``head`` then ``mib`` MiB of zeros, deflated without compressing them all (full flushes make the
    compressed MiB of zeros a piece that can be repeated)."""
    c = zlib.compressobj(9, zlib.DEFLATED, -15)
    first = c.compress(head) + c.flush(zlib.Z_FULL_FLUSH)
    piece = c.compress(ZEROS) + c.flush(zlib.Z_FULL_FLUSH)
    crc = zlib.crc32(head)
    for _ in range(mib):
        crc = zlib.crc32(ZEROS, crc)
    return name, 8, first + piece * mib + c.flush(), len(head) + mib * MiB, crc


def zip_bytes(members: list[tuple], zip64: bool = False) -> bytes:
    """A zip archive of ``(name, method, payload, size, crc)``, the payload already compressed; with ``zip64``,
    its directory gives sizes and offsets in zip64 fields (as for members over 4 GiB)."""
    out, central, offsets = bytearray(), bytearray(), []
    for name, method, payload, size, crc in members:
        raw = name.encode()
        offsets.append(len(out))
        out += struct.pack("<4s5H3L2H", b"PK\x03\x04", 20, 0, method, 0, 0x21, crc, len(payload), size,
                           len(raw), 0) + raw + payload
    for offset, (name, method, payload, size, crc) in zip(offsets, members):
        raw = name.encode()
        extra = struct.pack("<2H3Q", 1, 24, size, len(payload), offset) if zip64 else b""
        fields = (0xFFFFFFFF,) * 3 if zip64 else (len(payload), size, offset)
        central += struct.pack("<4s6H3L5H2L", b"PK\x01\x02", 45, 45, 0, method, 0, 0x21, crc, *fields[:2],
                               len(raw), len(extra), 0, 0, 0, 0, fields[2]) + raw + extra
    return bytes(out + central + struct.pack("<4s4H2LH", b"PK\x05\x06", 0, 0, len(members), len(members),
                                             len(central), len(out), 0))


def entries(data: bytes) -> dict[str, int]:
    """Where each central directory entry of ``data`` starts."""
    end = data.rfind(b"PK\x05\x06")
    count, _, pos = struct.unpack_from("<HLL", data, end + 10)
    found = {}
    for _ in range(count):
        nlen, elen, clen = struct.unpack_from("<3H", data, pos + 28)
        found[data[pos + 46:pos + 46 + nlen].decode()] = pos
        pos += 46 + nlen + elen + clen
    return found


def patched(path: Path, name: str, central: dict[str, int] | None = None, local: dict[str, int] | None = None) -> Path:
    """Rewrite ``crc``/``compressed``/``size`` of ``name``'s central directory entry and (or) local header."""
    data = bytearray(path.read_bytes())
    at = entries(bytes(data))[name]
    fields = {"crc": 16, "compressed": 20, "size": 24}
    for key, value in (central or {}).items():
        struct.pack_into("<L", data, at + fields[key], value)
    header = struct.unpack_from("<L", data, at + 42)[0]
    for key, value in (local or {}).items():
        struct.pack_into("<L", data, header + fields[key] - 2, value)
    path.write_bytes(bytes(data))
    return path


def rezipped(src: Path, dst: Path, method=zipfile.ZIP_DEFLATED) -> Path:
    """``src``'s members, same names and order, written again by ``zipfile`` (no data descriptors)."""
    with zipfile.ZipFile(src) as a, zipfile.ZipFile(dst, "w", method) as b:
        for info in a.infolist():
            b.writestr(info.filename, a.read(info.filename))
    return dst


def sample(tokens: int = 16, layers: int = 4, seed: int = 0) -> dict:
    return {"input_ids": torch.arange(tokens), "hidden_states": layered(tokens, H, layers, seed=seed),
            "loss_mask": torch.ones(tokens, dtype=torch.long)}


def _good(directory: Path) -> Path:
    return write_speculators(directory / "good.pt", torch.arange(16), layered(16, H, 4))


def _one_finding_each(directory: Path, bad: dict[str, str]) -> None:
    """Header mode and --values: each bad file exactly one one-line ``readable`` finding naming its exception
    type, the good file its full report; in seconds and well under the memory the attacks would cost."""
    for flags in ((), ("--values",)):
        run = run_capped(directory, "--hidden-size", str(H), *flags, timeout=60)
        assert run.returncode == 1 and run.report is not None, run.stderr
        assert run.seconds < 30 and run.max_rss_mb < 1024, (flags, run.seconds, run.max_rss_mb)
        for name, error in bad.items():
            found = run.findings(name)
            assert len(found) == 1, (flags, name, found)
            (f,) = found
            assert f["probe"] == "readable" and f["status"] == "broken", (flags, name, f)
            assert f["message"].endswith(f"[{error}]"), (flags, name, f["message"])
            assert "\n" not in f["message"] and 20 < len(f["message"]) < 400, f["message"]
        assert [f["status"] for f in run.findings("good.pt")] == ["ok"], flags
        assert run.report["summary"]["files"] == len(bad) + 1


# -- the attacks, through the command line ----------------------------------------------------------------------

def test_zip_bombs_are_refused_before_anything_is_inflated(tmp_path):
    """768 MiB of deflated zeros declared by a file under 1 MiB: in data.pkl itself (the pickle is read whole),
    in the storages of a sample's layers, and in a member nothing refers to. The first cost 1.5 GB before."""
    _good(tmp_path)
    head = pickled({"input_ids": Tensor(Storage("0", torch.LongStorage, 16), (16,))})
    (tmp_path / "pickle_bomb.pt").write_bytes(zip_bytes([
        deflated_zeros("archive/data.pkl", 768, head), stored("archive/data/0", bytes(128)),
        stored("archive/version", b"3\n")]))
    rows = 192 * MiB // (4096 * 2)
    layers = [Tensor(Storage(str(k + 2), torch.BFloat16Storage, rows * 4096), (rows, 4096)) for k in range(4)]
    bomb = {"input_ids": Tensor(Storage("0", torch.LongStorage, rows), (rows,)), "hidden_states": layers,
            "loss_mask": Tensor(Storage("1", torch.LongStorage, rows), (rows,))}
    zeros = deflated_zeros("archive/data/2", 192)
    (tmp_path / "storage_bomb.pt").write_bytes(zip_bytes(
        [stored("archive/data.pkl", pickled(bomb)), stored("archive/data/0", bytes(8 * rows)),
         stored("archive/data/1", bytes(8 * rows))] + [(f"archive/data/{k + 2}",) + zeros[1:] for k in range(4)]))
    with zipfile.ZipFile(tmp_path / "good.pt") as good:
        (tmp_path / "unreferenced_bomb.pt").write_bytes(zip_bytes(
            [stored(i.filename, good.read(i)) for i in good.infolist()] + [deflated_zeros("good/extra", 768)]))
    assert all((tmp_path / name).stat().st_size < MiB for name in ("pickle_bomb.pt", "unreferenced_bomb.pt"))
    _one_finding_each(tmp_path, {"pickle_bomb.pt": "ZipBomb", "storage_bomb.pt": "ZipBomb",
                                 "unreferenced_bomb.pt": "ZipBomb"})


def test_directories_that_lie_about_sizes_are_refused_unread(tmp_path):
    """Central directory sizes that the local header, the data descriptor, the file or the pickle contradict,
    larger or smaller (torch's own reader allocates what the directory claims)."""
    _good(tmp_path)
    paths = {}
    for name in ("pkl_2gib", "pkl_smaller", "storage_larger", "storage_2gib", "local_disagrees", "short_storage"):
        paths[name] = write_speculators(tmp_path / f"{name}.pt", torch.arange(16), layered(16, H, 4))
    patched(paths["pkl_2gib"], "pkl_2gib/data.pkl", {"compressed": 2 << 30, "size": 2 << 30})
    patched(paths["pkl_smaller"], "pkl_smaller/data.pkl", {"compressed": 100, "size": 100})
    patched(paths["storage_larger"], "storage_larger/data/1", {"compressed": 2048 + 64, "size": 2048 + 64})
    patched(paths["storage_2gib"], "storage_2gib/data/1", {"compressed": 0xFFFF0000, "size": 0xFFFF0000})
    # zipfile's archives keep sizes in the local header: one that disagrees, and one that agrees on a lie.
    rezipped(paths["local_disagrees"], tmp_path / "tmp.pt", zipfile.ZIP_STORED).replace(paths["local_disagrees"])
    patched(paths["local_disagrees"], "local_disagrees/data/2", local={"size": 1 << 30, "compressed": 1 << 30})
    rezipped(paths["short_storage"], tmp_path / "tmp.pt", zipfile.ZIP_STORED).replace(paths["short_storage"])
    patched(paths["short_storage"], "short_storage/data/2", {"compressed": 1024, "size": 1024},
            {"compressed": 1024, "size": 1024})
    _one_finding_each(tmp_path, {f"{name}.pt": "DirectoryMismatch" for name in paths})


def test_files_of_one_pickle_share_its_stubs_but_each_file_is_checked_against_its_own_directory(tmp_path):
    """Files of one token count hold the same data.pkl byte for byte, so it is unpickled once: the second file
    reuses the first one's stubs and views, the third (same pickle, a storage member shorter than the pickle
    needs) is still refused by its own directory."""
    good = _good(tmp_path)
    again = write_speculators(tmp_path / "again.pt", torch.arange(16), layered(16, H, 4, seed=1))
    short = write_speculators(tmp_path / "short.pt", torch.arange(16), layered(16, H, 4, seed=2))
    rezipped(short, tmp_path / "tmp.pt", zipfile.ZIP_STORED).replace(short)
    patched(short, "short/data/2", {"compressed": 1024, "size": 1024}, {"compressed": 1024, "size": 1024})
    pickles = {read_archive(str(p)).pickle for p in (good, again, short)}
    assert len(pickles) == 1 and len(next(iter(pickles))) <= torch_header.MEMO_PICKLE  # the case arises
    torch_header._unpickled_before.cache_clear()
    first, second, third = (read_file(str(p), hidden_size=H) for p in (good, again, short))
    assert torch_header._unpickled_before.cache_info().hits == 2  # unpickled once for the three
    assert first.failure is None and second.failure is None, (first.failure, second.failure)
    (a,), (b,) = first.samples, second.samples
    assert (a.file, b.file) == (str(good), str(again))
    assert b.layers is a.layers and b.token_ids is a.token_ids and len(b.layers) == 4
    assert third.failure is not None and third.failure.error_type == "DirectoryMismatch", third.failure
    assert "storage" in third.failure.message and "1024 bytes" in third.failure.message, third.failure.message


def test_a_pickle_sharing_containers_is_one_finding_not_five_million_layers(tmp_path):
    """5000 references to one sample whose hidden_states are 1000 references to one tensor (15 KB; 14 to 29 s
    and 1.2 to 1.45 GB in header mode before, MemoryError or minutes with --values); one list of layers shared
    by distinct samples; a list holding itself."""
    _good(tmp_path)
    one = sample(8, 1)
    torch.save([{**one, "hidden_states": one["hidden_states"] * 1000}] * 5000, tmp_path / "shared_sample.pt")
    layers = layered(8, H, 4)
    torch.save([{**sample(8), "hidden_states": layers} for _ in range(3)], tmp_path / "shared_layers.pt")
    loop: list = [sample(8)]
    loop.append(loop)
    torch.save(loop, tmp_path / "loop.pt")
    assert (tmp_path / "shared_sample.pt").stat().st_size < 30_000
    _one_finding_each(tmp_path, {"shared_sample.pt": "SharedContainer", "shared_layers.pt": "SharedContainer",
                                 "loop.pt": "SharedContainer"})


def test_a_layer_stored_twice_in_one_sample_is_judged_by_the_value_rules(tmp_path):
    layers = layered(16, H, 3)
    torch.save({**sample(16), "hidden_states": [layers[0], layers[1], layers[1], layers[2]]}, tmp_path / "dup.pt")
    assert read_file(str(tmp_path / "dup.pt")).failure is None
    run = run_capped(tmp_path, "--hidden-size", str(H), "--values", timeout=60)
    assert run.returncode == 1 and [f["probe"] for f in run.failing("dup.pt")] == ["distinct_layers"]


def test_a_deflated_archive_torch_loads_passes_with_its_values(tmp_path):
    """torch.save re-zipped with ZIP_DEFLATED (names and order kept): torch.load reads it, and so must the gate,
    in header mode and with --values (memory-mapping it once read compressed bytes as values)."""
    saved = sample(24, 4)
    torch.save(saved, tmp_path / "plain.pt")
    path = rezipped(tmp_path / "plain.pt", tmp_path / "data_0.pt")
    (tmp_path / "plain.pt").unlink()
    _good(tmp_path)
    with zipfile.ZipFile(path) as archive:
        assert {i.compress_type for i in archive.infolist()} == {zipfile.ZIP_DEFLATED}
    loaded = torch.load(path, weights_only=True)
    assert all(torch.equal(a, b) for a, b in zip(loaded["hidden_states"], saved["hidden_states"]))
    for flags in ((), ("--values",)):
        run = run_capped(tmp_path, "--hidden-size", str(H), *flags, timeout=60)
        assert run.returncode == 0, (flags, run.failing())
        assert [f["status"] for f in run.findings("data_0.pt")] == ["ok"]
    view = read_file(str(path))
    with open_file(view) as (st,):
        assert torch.equal(st.token_ids(), saved["input_ids"]) and torch.equal(st.loss_mask(), saved["loss_mask"])
        for i, layer in enumerate(saved["hidden_states"]):
            assert torch.equal(st.layer(i), layer)
        assert torch.equal(st.block(5, 9), torch.stack([h[5:9] for h in saved["hidden_states"]], dim=1))
    torch.save(saved, tmp_path / "stored.pt")
    mapped, inflated = (value_stats.scan_file(read_file(str(p)), True) for p in (tmp_path / "stored.pt", path))
    assert inflated.failure is None and inflated.samples[0].layers == mapped.samples[0].layers
    assert inflated.bytes_read == mapped.bytes_read


# -- the bounds, on small fixtures ------------------------------------------------------------------------------

def test_the_inflation_limit_is_a_constant_plus_fifty_times_the_file(tmp_path):
    assert zip_archive.inflation_limit(0) == 16 * MiB
    assert zip_archive.inflation_limit(MiB) == 66 * MiB
    under, over = tmp_path / "under.pt", tmp_path / "over.pt"
    under.write_bytes(zip_bytes([deflated_zeros("a/extra", 16)]))
    over.write_bytes(zip_bytes([deflated_zeros("a/extra", 18)]))
    assert read_directory(str(under)).members["a/extra"].size == 16 * MiB
    with pytest.raises(ZipBomb, match=r"declare 18874368 bytes uncompressed from a \d+-byte file"):
        read_directory(str(over))
    # A member may not declare more than deflate can make of its compressed bytes, whatever the total.
    name, method, payload, _, crc = deflated("a/x", bytes(1000))
    (tmp_path / "x.pt").write_bytes(zip_bytes([(name, method, payload, len(payload) * 2000, crc)]))
    with pytest.raises(ZipBomb, match="more than deflate can produce"):
        read_directory(str(tmp_path / "x.pt"))


@pytest.mark.parametrize("case, expected", [
    ("overlap", r"'a/one' runs to byte \d+, past the start of 'a/two' at byte \d+"),
    ("one_header", "no local header for 'a/two' at byte 0"),  # two entries, one local header
    ("duplicate", "two members are named 'a/one'"),
    ("count", "counts 4 entries but entry 3 is not there"),
    ("past_directory", "declares 500 bytes, more than lie between"),
])
@pytest.mark.parametrize("whole", [True, False], ids=["read-whole", "read-by-offsets"])
def test_inconsistent_directories_are_refused(tmp_path, monkeypatch, case, expected, whole):
    if not whole:
        monkeypatch.setattr(zip_archive, "_WHOLE", 0)  # what files over 256 KiB get
    members = [stored("a/data.pkl", pickled({"x": 1})), stored("a/one", b"1" * 100), stored("a/two", b"2" * 100)]
    path = tmp_path / "x.pt"
    path.write_bytes(zip_bytes(members))
    if case == "overlap":  # the directory and the local header agree on a size that runs into the next member
        patched(path, "a/one", {"compressed": 150, "size": 150}, {"compressed": 150, "size": 150})
    elif case == "one_header":
        data = bytearray(path.read_bytes())
        struct.pack_into("<L", data, entries(bytes(data))["a/two"] + 42, 0)
        path.write_bytes(bytes(data))
    elif case == "duplicate":
        path.write_bytes(zip_bytes([members[0], members[1], ("a/one",) + members[2][1:]]))
    elif case == "count":
        data = bytearray(path.read_bytes())
        struct.pack_into("<HH", data, data.rfind(b"PK\x05\x06") + 8, 4, 4)
        path.write_bytes(bytes(data))
    else:
        patched(path, "a/two", {"compressed": 500, "size": 500})
    with pytest.raises(DirectoryMismatch, match=expected):
        read_directory(str(path))
    assert read_file(str(path)).failure.error_type == "DirectoryMismatch"


@pytest.mark.parametrize("whole", [True, False], ids=["read-whole", "read-by-offsets"])
def test_the_directory_reader_agrees_with_zipfile_on_real_archives(tmp_path, monkeypatch, whole):
    """torch.save's archives (zip64 end records, data descriptors), zipfile's, deflated, and zip64 fields."""
    if not whole:
        monkeypatch.setattr(zip_archive, "_WHOLE", 0)
    torch.save(sample(), tmp_path / "saved.pt")
    rezipped(tmp_path / "saved.pt", tmp_path / "deflated.pt")
    with zipfile.ZipFile(tmp_path / "zip64.pt", "w", zipfile.ZIP_DEFLATED) as z, \
            zipfile.ZipFile(tmp_path / "saved.pt") as src:
        for info in src.infolist():
            with z.open(info.filename, "w", force_zip64=True) as out:
                out.write(src.read(info))
    with zipfile.ZipFile(tmp_path / "saved.pt") as src:
        (tmp_path / "zip64_directory.pt").write_bytes(zip_bytes([deflated(i.filename, src.read(i))
                                                                 for i in src.infolist()], zip64=True))
    for name in ("saved.pt", "deflated.pt", "zip64.pt", "zip64_directory.pt"):
        directory = read_directory(str(tmp_path / name))
        with zipfile.ZipFile(tmp_path / name) as z:
            infos = z.infolist()
            assert list(directory.members) == [i.filename for i in infos]
            for info in infos:
                m = directory.members[info.filename]
                assert (m.method, m.compressed, m.size, m.crc) == (info.compress_type, info.compress_size,
                                                                   info.file_size, info.CRC), (name, m)
        assert read_file(str(tmp_path / name), hidden_size=H).failure is None, name


def test_a_file_changed_since_its_directory_was_read_is_checked_again(tmp_path):
    path = _good(tmp_path)
    assert read_directory(str(path)) is read_directory(str(path))  # the header, then the values, of one file
    path.write_bytes(zip_bytes([deflated_zeros("good/extra", 64)]))
    with pytest.raises(ZipBomb):
        read_directory(str(path))


def test_a_stream_never_gives_more_than_declared_nor_reads_past_its_bytes(tmp_path):
    data = bytes(range(256)) * 64
    name, method, payload, size, crc = deflated("a/m", data)
    (tmp_path / "more.pt").write_bytes(zip_bytes([(name, method, payload, size - 1000, zlib.crc32(data[:-1000]))]))
    directory = read_directory(str(tmp_path / "more.pt"))
    stream = zip_archive.MemberStream(directory, directory.members["a/m"])
    assert bytes(stream.read(0, size - 1000)) == data[:-1000]  # it inflates to more: only what is declared
    with pytest.raises(DirectoryMismatch, match="declares 15384 bytes, fewer than the 15385 needed"):
        stream.read(0, size - 999)
    (tmp_path / "less.pt").write_bytes(zip_bytes([(name, method, payload[:len(payload) // 2], size, crc)]))
    directory = read_directory(str(tmp_path / "less.pt"))
    with pytest.raises(DirectoryMismatch, match="inflates to"):
        zip_archive.MemberStream(directory, directory.members["a/m"]).read(0, size)


def test_inflating_a_range_holds_only_the_range(tmp_path, monkeypatch):
    """1 KiB at 60 MiB into 64 MiB of deflated zeros: what is allocated is the range and a chunk, not 60 MiB."""
    monkeypatch.setattr(zip_archive, "INFLATION_BASE", 64 * MiB)  # zeros: over the limit of a 64 KiB file
    (tmp_path / "z.pt").write_bytes(zip_bytes([deflated_zeros("a/z", 64)]))
    directory = read_directory(str(tmp_path / "z.pt"))
    stream = zip_archive.MemberStream(directory, directory.members["a/z"])
    tracemalloc.start()
    try:
        assert bytes(stream.read(60 * MiB, 60 * MiB + 1024)) == bytes(1024)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 4 * MiB and stream.spent == 60 * MiB + 1024


def test_values_of_a_deflated_sample_are_read_in_chunks_each_byte_inflated_once(tmp_path, monkeypatch):
    saved = sample(512, 4)
    saved["hidden_states"] = layered(512, 1024, 4)  # 4 MiB of layers
    torch.save(saved, tmp_path / "plain.pt")
    path = rezipped(tmp_path / "plain.pt", tmp_path / "data.pt")
    chunk = 256 << 10
    monkeypatch.setattr(value_stats, "CHUNK_BYTES", chunk)
    view = read_file(str(path))
    value_stats._projection(1024)  # made once per hidden size (256 KiB), not per sample
    tracemalloc.start()
    try:
        values = value_stats.scan_file(view, True)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert values.failure is None and values.bytes_read == 4 * MiB
    # A part of rows as stored, its layers as read before they are stacked, its values as float32 (twice the
    # bfloat16 bytes), and the inflater's reads: a few chunks, never the 4 MiB sample (8 MiB as float32).
    assert peak < 6 * chunk, peak
    with torch_load.open_values(str(path)) as obj:
        layers = obj["hidden_states"]
        for start in range(0, 512, 100):
            for layer, want in zip(layers, saved["hidden_states"]):
                assert torch.equal(layer[start:start + 100], want[start:start + 100])
        assert layers[0]._inflater.spent == 4 * MiB  # in order: every storage inflated exactly once
        assert torch.equal(layers[2][7:8, 100:300], saved["hidden_states"][2][7:8, 100:300])  # one row, 200 columns


def test_views_in_a_deflated_archive_read_right(tmp_path):
    """Tensors that are views: columns of one stacked tensor, row ranges at an offset, a transposed view."""
    stack = torch.randn(7, 3, H).bfloat16()
    base = torch.randn(40, H)
    saved = {"input_ids": torch.arange(7), "hidden_states": [stack[:, i] for i in range(3)] + [base[10:17]],
             "loss_mask": torch.ones(7, dtype=torch.long), "t": base[:7, :7].t()}
    torch.save(saved, tmp_path / "plain.pt")
    path = rezipped(tmp_path / "plain.pt", tmp_path / "views.pt")
    with torch_load.open_values(str(path)) as obj:
        for got, want in zip(obj["hidden_states"], saved["hidden_states"]):
            assert torch.equal(got[:], want) and torch.equal(got[2:5, 1:9], want[2:5, 1:9])
        assert torch.equal(obj["t"][:], saved["t"])


def test_shared_containers_are_found_in_one_visit_each():
    t = TensorStub("torch.float32", (2, 2), torch_header.StorageRef("float32", "0", 4), 0, (2, 1))
    one = {"hidden_states": [t]}
    for obj, where in (([one, one], r"\[0\] and again at \[1\]"), ({"a": [[t]] * 2}, r"\['a'\]\[0\]"),
                       ({"s": (t,), "u": [{"v": None}]}, None)):
        if where is None:
            refuse_shared(obj)
        else:
            with pytest.raises(SharedContainer, match=where):
                refuse_shared(obj)
    refuse_shared({"hidden_states": [t, t, t]})  # a duplicated layer: for the value rules
    dims = (4096, 3)
    refuse_shared([{"dims": dims} for _ in range(3)])  # a constant tuple of numbers, shared by Python itself
    loop: list = []
    loop.append(loop)
    with pytest.raises(SharedContainer, match="list of 1 items at the top and again at \\[0\\]"):
        refuse_shared(loop)
    deep: list = []
    for _ in range(100_000):  # no recursion
        deep = [deep]
    refuse_shared(deep)
    wide = [[t] * 1000] * 5000
    with pytest.raises(SharedContainer) as refused:
        refuse_shared(wide)
    assert "\n" not in str(refused.value) and len(str(refused.value)) <= 300


def test_oversized_pickles_and_sets_are_refused(tmp_path):
    big = pickled({"x": "y" * (torch_header.MAX_PICKLE + 1)})
    (tmp_path / "big.pt").write_bytes(zip_bytes([stored("a/data.pkl", big)]))
    with pytest.raises(OversizedPickle, match="over the 4194304-byte limit"):
        read_archive(str(tmp_path / "big.pt"))
    sets = pickle.dumps({"pad": "p" * (100 << 10), "s": {1, 2}}, protocol=4)
    (tmp_path / "sets.pt").write_bytes(zip_bytes([stored("a/data.pkl", sets)]))
    with pytest.raises(OversizedPickle, match="builds sets"):
        read_archive(str(tmp_path / "sets.pt"))
    harmless = pickle.dumps({"pad": "\x8f" * (100 << 10)}, protocol=2)  # the byte, but no set
    (tmp_path / "ok.pt").write_bytes(zip_bytes([stored("a/data.pkl", harmless)]))
    assert read_archive(str(tmp_path / "ok.pt")).pickle == harmless


def _built_onto(path: Path, state: dict) -> Path:
    """A speculators sample whose pickle, after building its layer's tensor, BUILDs ``state`` onto it as slot
    state (pickle's way of setting a slotted object's fields: here the stub's ``shape``, ``offset`` or ``stride``,
    after ``_rebuild_tensor_v2`` checked them)."""
    buffer = io.BytesIO()
    torch.save({"input_ids": torch.arange(4), "hidden_states": [torch.zeros(4, 8)], "loss_mask": torch.ones(4).long()},
               buffer)
    with zipfile.ZipFile(io.BytesIO(buffer.getvalue())) as src, zipfile.ZipFile(path, "w") as dst:
        for name in src.namelist():
            data = src.read(name)
            if name.endswith("data.pkl"):
                # Before the APPEND of the built layer; the state without memo opcodes (they would overwrite
                # the memo the rest of the pickle reads).
                after_layer = next(at for op, _, at in pickletools.genops(data) if op.name == "APPEND")
                built = pickletools.optimize(pickle.dumps(state, 2))[2:-1]
                data = data[:after_layer] + b"N" + built + b"\x86b" + data[after_layer:]
            dst.writestr(name, data)
    return path


@pytest.mark.parametrize("state", [{"shape": (4, 16)}, {"offset": 1 << 28}, {"stride": (0, 0)}])
def test_state_built_onto_a_checked_tensor_is_judged_by_torch_load(tmp_path, state):
    """torch.load refuses such a pickle (it calls ``tensor.set_(*state)``): the gate, which read the stub as
    changed, passed it with a shape or offset torch never loads; now it says the file does not load."""
    path = _built_onto(tmp_path / "data_0.pt", state)
    with pytest.raises(Exception) as refused:
        torch.load(path, weights_only=True)
    view = read_file(str(path))
    assert view.failure is not None and not view.samples
    assert view.failure.message.startswith("torch.load(weights_only=True) failed") and \
        type(refused.value).__name__ == view.failure.error_type, view.failure
