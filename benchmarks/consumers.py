"""The audit in the wild: audit a corpus of real consumers of vLLM's internals at the vLLM they pin and at a
later one, and print per consumer and build: touchpoints, ok, broken, changed, unknown, error.

At the pinned build the consumer's code is known to work, so every ``broken`` finding there is a false alarm
unless the code is dead or belongs to an optional extra pinned elsewhere; ``--list-broken`` prints them for
that verdict. Releases come from the package index (downloaded once, cached, read statically).

    python benchmarks/consumers.py                      # the whole corpus
    python benchmarks/consumers.py --only arctic --list-broken
    python benchmarks/consumers.py --json out.json      # counts and findings, for comparing two runs
    python benchmarks/consumers.py --round 2            # the second round's corpus (--held-out: its kept pair,
                                                        # --held-out 2: the pair taken after that one was read)
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from compat import sources  # noqa: E402
from compat.audit.pipeline import AuditOptions, Auditor  # noqa: E402
from compat.consumer.scan import scan_tree  # noqa: E402
from compat.vllm.builds import open_build  # noqa: E402

# (distribution, release, the vLLM it pins, later vLLM releases to audit it against)
CORPUS = [
    ("speculators", "0.3.0", "0.11.0", ("0.12.0", "0.18.0")),
    ("arctic-inference", "0.1.2", "0.11.0", ("0.13.0",)),
    ("arctic-inference", "0.2.0", "0.18.0", ("0.26.0",)),
    ("arctic-inference", "0.3.0", "0.26.0", ("0.32.0",)),
    ("vllm-ascend", "0.11.0", "0.11.0", ("0.13.0",)),
    ("vllm-ascend", "0.13.0", "0.13.0", ("0.18.0",)),
    ("vllm-ascend", "0.18.0", "0.18.0", ("0.26.0",)),
    # Optional extras pin these: trl[vllm] (>=0.22.0, <=0.31.0), openrlhf[vllm] (==0.29.0), verl[vllm] (==0.24.0).
    ("trl", "1.16.0", "0.31.0", ("0.22.0", "0.33.0")),
    ("openrlhf", "0.11.2", "0.29.0", ("0.33.0",)),
    ("verl", "0.9.1", "0.24.0", ("0.29.0",)),
    # Plugins and libraries added for #20. vllm-rbln pins vllm==0.30.0+cpu, skyrl-train vllm==0.11.0 (extra);
    # vllm-tgis-adapter (vllm>=0.10.0) and areal (no vLLM pin) are audited at the vLLM release that was newest
    # on the day they were uploaded (2025-12-17: 0.12.0; 2026-06-10: 0.22.1). vllm-neuron 0.1.0 (an empty
    # wheel), llmcompressor 0.14.0.1 and aibrix 0.8.0 touch no vLLM internal and are left out.
    ("vllm-rbln", "0.12.0", "0.30.0", ("0.33.0",)),
    ("skyrl-train", "0.3.1", "0.11.0", ("0.14.0",)),
    ("vllm-tgis-adapter", "0.10.0", "0.12.0", ("0.15.0",)),
    ("areal", "1.0.4", "0.22.1", ("0.25.0",)),
]
# The second round (#36), consumers nobody had audited, each at the release it was written for and a later one:
# a hardware plugin (vllm-kunlun 0.11.1: "Base on v0.11.0" in its code, its v0.11.0rc1 in 2025/12), a fine-tuning
# library (ms-swift 4.6.0, no pin; 0.31.0 was the newest vLLM release on its upload day, 2026-10-13) and an
# interpretability plugin (vllm-lens 1.3.0 pins vllm==0.30.0).
SECOND = [
    ("vllm-kunlun", "0.11.1", "0.11.0", ("0.14.0",)),
    ("ms-swift", "4.6.0", "0.31.0", ("0.34.0",)),
    ("vllm-lens", "1.3.0", "0.30.0", ("0.33.0",)),
]
# The second round's own held-out pair, audited only once the rules tuned on SECOND were done (--round 2 --held-out):
# vllm-mindspore 0.5.1 has no pin; its code imports vllm.config.model, .cache and .scheduler (the config package
# split of 0.11.0) and cites vllm/blob/v0.11.0 for its newest adaptations (the v0.9.1 links head files adapted
# earlier): written for 0.11.0 (first chosen as 0.9.1 from those older links: 77 broken there, mostly modules
# 0.9.1 does not have yet). vllm-musa 0.1.1 supports vLLM 0.13.0.
SECOND_HELD_OUT = [
    ("vllm-mindspore", "0.5.1", "0.11.0", ("0.14.0",)),
    ("vllm-musa", "0.1.1", "0.13.0", ("0.16.0",)),
]
# A second pair nobody here had audited, taken after the first pair's false alarms had been read and their causes
# made rules (so the first pair no longer checks them): vllm-spyre 1.10.0 pins vllm>=0.17.0,<0.18.1 (written for
# 0.18.0); tpu-inference 0.32.0 is versioned with vLLM (written for 0.32.0; 0.34.0 is the newest release).
SECOND_FRESH = [
    ("vllm-spyre", "1.10.0", "0.18.0", ("0.21.0",)),
    ("tpu-inference", "0.32.0", "0.32.0", ("0.34.0",)),
]
# A third pair, chosen by a helper that saw no finding (a serving framework with KV-connector and scheduler code, and a
# fine-tuning library that patches vLLM), audited once after the second pair's false alarms were made rules:
# ai-dynamo 1.4.0 pins vllm==0.26.0 (extra vllm); unsloth-zoo 2026.9.9 has no pin: 0.30.0 was the newest vLLM
# release on its upload day (2026-10-01).
THIRD_FRESH = [
    ("ai-dynamo", "1.4.0", "0.26.0", ("0.28.0",)),
    ("unsloth-zoo", "2026.9.9", "0.30.0", ("0.32.0",)),
]
# Kept aside: audited only to check the rules tuned on CORPUS (--held-out), never while tuning them. kserve pins
# vllm==0.24.0 (extra llm); vllm-metal 0.1.0 (2026-01-07) has no pin: 0.13.0 was the newest release that day.
HELD_OUT = [
    ("kserve", "0.21.0", "0.24.0", ("0.27.0",)),
    ("vllm-metal", "0.1.0", "0.13.0", ("0.16.0",)),
]
STATUSES = ("ok", "broken", "changed", "unknown", "error")
CLASSIFIED = Path(__file__).with_name("classified.json")
"""``broken`` findings read against both sources: {consumer, vllm, check, location, symbol, class (true, dead,
false), why}. A finding is matched by consumer, build, check, location and symbol."""


def classified() -> dict[tuple[str, str, str, str, str], dict]:
    if not CLASSIFIED.exists():
        return {}
    return {(c["consumer"], c["vllm"], c["check"], c["location"], c["symbol"]): c
            for c in json.loads(CLASSIFIED.read_text())}


def verdicts(row: dict, known: dict) -> Counter:
    """How the row's broken findings were classified: true, dead, false, or unread."""
    found = Counter()
    for f in row["findings"]:
        if f["status"] == "broken":
            entry = known.get((row["consumer"], row["vllm"], f["probe"], f["consumer_location"], f["symbol"]))
            found[entry["class"] if entry else "unread"] += 1
    return found


def recall(rows: list[dict], known: dict) -> list[tuple[tuple[str, ...], str | None]]:
    """The findings read as true for these audits that are not ``broken`` now, with what they are now (None: ok,
    since only findings that are not ok are kept)."""
    audited = {(r["consumer"], r["vllm"]) for r in rows}
    now = {(r["consumer"], r["vllm"], f["probe"], f["consumer_location"], f["symbol"]): f["status"]
           for r in rows for f in r["findings"]}
    return [(key, now.get(key)) for key, c in known.items()
            if c["class"] == "true" and (c["consumer"], c["vllm"]) in audited and now.get(key) != "broken"]


def audit(name: str, release: str, pinned: str, later: tuple[str, ...]) -> list[dict]:
    scan = scan_tree(sources.tree_from_release(name, release))
    auditor = Auditor(AuditOptions(confirm="never"))
    rows = []
    for vllm in (pinned, *later):
        started = time.perf_counter()
        result = auditor.run(scan, open_build(vllm), written_for=open_build(pinned).surface)
        counts = Counter(f.status.value for f in result.findings)
        rows.append({"consumer": f"{name}=={release}", "vllm": vllm, "pinned": vllm == pinned,
                     "touchpoints": len(scan.touchpoints), **{s: counts.get(s, 0) for s in STATUSES},
                     "seconds": round(time.perf_counter() - started, 1),
                     "findings": [f.as_dict() for f in result.findings if f.status.value != "ok"]})
    return rows


def _about_vllm(finding: dict) -> bool:
    """The finding names a vLLM object: a dotted vLLM path, vLLM's worker, a model of the build, or a worker
    method asked for by name (an RPC)."""
    symbol = finding["symbol"] or ""
    return symbol.startswith(("vllm", "<vLLM")) or finding["probe"] in ("rpc", "model", "startup") or \
        ":" in symbol


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--only", help="consumers whose name contains this")
    p.add_argument("--list-broken", action="store_true", help="list the broken findings at the pinned builds")
    p.add_argument("--json", type=Path, help="write counts and non-ok findings here")
    p.add_argument("--round", type=int, choices=(1, 2), default=1,
                   help="the corpus of the first round (CORPUS, HELD_OUT) or the second (SECOND, SECOND_HELD_OUT)")
    p.add_argument("--held-out", nargs="?", type=int, const=1, default=0, choices=[1, 2, 3],
                   help="audit the round's held-out consumers instead (2, 3: the second round's second and third "
                        "pair)")
    args = p.parse_args()
    rows = []
    known = classified()
    print(f"{'consumer':28} {'vllm':8} {'touchpoints':>11} " + " ".join(f"{s:>7}" for s in STATUSES)
          + "   broken read: true/dead/false/unread")
    corpus, held_out = (CORPUS, HELD_OUT) if args.round == 1 else (
        SECOND, {2: SECOND_FRESH, 3: THIRD_FRESH}.get(args.held_out, SECOND_HELD_OUT))
    for entry in held_out if args.held_out else corpus:
        if args.only and args.only not in entry[0]:
            continue
        for row in audit(*entry):
            rows.append(row)
            mark = " (pinned)" if row["pinned"] else ""
            read = verdicts(row, known)
            print(f"{row['consumer']:28} {row['vllm']:8} {row['touchpoints']:>11} "
                  + " ".join(f"{row[s]:>7}" for s in STATUSES)
                  + f"   {read['true']}/{read['dead']}/{read['false']}/{read['unread']}" + mark, flush=True)
    pinned = [r for r in rows if r["pinned"]]
    print(f"\nat the pinned builds: {sum(r['broken'] for r in pinned)} broken, "
          f"{sum(r['unknown'] for r in pinned)} unknown over {len(pinned)} audits")
    for label, group in (("written for", pinned), ("later", [r for r in rows if not r["pinned"]])):
        read = sum((verdicts(r, known) for r in group), Counter())
        judged = read["true"] + read["dead"] + read["false"]
        share = f"{100 * read['false'] / judged:.1f}%" if judged else "n/a"
        print(f"broken at the {label} builds, read against both sources: {read['true']} true, {read['dead']} dead "
              f"code, {read['false']} false alarms ({share} of those read), {read['unread']} not read")
    lost = recall(rows, known)
    trues = sum(1 for c in known.values() if c["class"] == "true" and (c["consumer"], c["vllm"]) in
                {(r["consumer"], r["vllm"]) for r in rows})
    print(f"recall: of {trues} findings read as true for these audits, {trues - len(lost)} are broken now")
    for key, status in lost:
        print(f"  not broken now ({status or 'ok'}): {' '.join(key)}")
    outside = [(row, f) for row in pinned for f in row["findings"] if f["status"] == "unknown"
               and not _about_vllm(f)]
    print(f"unknown findings at the pinned builds not about a vLLM name: {len(outside)}")
    for row, f in outside:
        print(f"  {row['consumer']} @ {row['vllm']}: {f['probe']} {f['consumer_location']} {f['message'][:200]}")
    if args.list_broken:
        for row in pinned:
            for f in row["findings"]:
                if f["status"] == "broken":
                    print(f"{row['consumer']} @ {row['vllm']}: {f['probe']} {f['consumer_location']} {f['message']}")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
