"""Message recall's ranking in numpy, over the conversations `recall --dump DIR` writes: an
experiment on the ranking runs in seconds instead of a Q1 run's minutes.

    target/release/recall --locomo PATH --model target/models/all-MiniLM-L6-v2 --dump /tmp/dump
    python3 tools/bench-backends/scripts/recall_mirror.py /tmp/dump \
        --check target/bench-report/recall.json

It prints, per embedder, the share of evidence turns in the defaults' context per conversation
and pooled, as Q1's "Per conversation" table does, and with `--check` fails unless every
conversation's count equals the Q1 report's (the mirror is then still the engine's ranking:
run it after any change to `hybrid_order` or `in_context` in
`crates/mnemix-engine/src/tiers/recall.rs`). To try a ranking, change `choose` (or the
functions it calls) and compare the rows; a result is only a hint until `cargo xtask recall`
shows it through the engine. The dump holds the dataset's text: keep it out of the
repository. Needs numpy.
"""

import argparse
import glob
import json
import math
import os
import sys

import numpy as np

# The engine's defaults (MemoryConfig) and core's fusion constant (RRF_K).
WINDOW, LIMIT, CANDIDATES, CONTEXT_WEIGHT, RRF_K = 6, 14, 100, 0.4, 10.0
# Q1's categories: multi-hop, temporal, open-domain, single-hop.
CATEGORIES = (1, 2, 3, 4)


def unit(v):
    n = np.linalg.norm(v)
    return v / n if n > 0 else v


def in_context(embedded, weight):
    """The stored vectors: each the unit sum of its own unit vector and `weight` of the one
    before it (the engine's `in_context`)."""
    out, previous = [], None
    for e in embedded:
        v = unit(e)
        if previous is not None:
            v = unit(v + weight * previous)
        out.append(v)
        previous = v
    return np.array(out)


def relevances_of_held(query_len, held):
    """Core's `lexical::relevances_of_held`: the share of the question's IDF weight a text
    holds, the weights taken over the texts given."""
    n = sum(1 for h in held if h)
    df = [0] * query_len
    for h in held:
        for position in h:
            df[position] += 1
    weights = [math.log(1.0 + (n - d + 0.5) / (d + 0.5)) for d in df]
    total = sum(weights)
    return [sum(weights[p] for p in h) / total if total > 0 else 0.0 for h in held]


def carried(own, weight):
    """Each message's relevance carrying `weight` of its neighbours', each way, fading."""
    before, after = list(own), list(own)
    for i in range(1, len(own)):
        before[i] += weight * before[i - 1]
    for i in range(len(own) - 1, 0, -1):
        after[i - 1] += weight * after[i]
    return [before[i] + after[i] - own[i] for i in range(len(own))]


def rrf(lists):
    fused = {}
    for ranked in lists:
        for rank, item in enumerate(ranked):
            fused[item] = fused.get(item, 0.0) + 1.0 / (RRF_K + rank + 1)
    return fused


def choose(conversation, question):
    """The turns (indexes) of the context `prepare` builds when the question is asked after
    the last turn: the window, then the recalled messages (the engine's `hybrid_order`)."""
    vectors = conversation["vectors"]
    n = len(vectors)
    window_start = max(n - WINDOW, 0)
    window = list(range(window_start, n))
    if window_start == 0:
        return window
    cosine = vectors @ question["vector"]
    # The search asks for the candidates and the window's size more, then keeps those before it.
    searched = np.argsort(-cosine, kind="stable")[: CANDIDATES + WINDOW]
    nearness = [int(i) for i in searched if i < window_start][:CANDIDATES]
    own = relevances_of_held(question["qlen"], question["held"][:window_start])
    relevance = {i: r for i, r in enumerate(carried(own, CONTEXT_WEIGHT)) if r > 0}
    # Latest first, then by relevance (stable), as the engine proposes them.
    by_words = [i for i in range(window_start - 1, -1, -1) if i in relevance]
    by_words.sort(key=lambda i: -relevance[i])
    near = set(nearness)
    pool = nearness + [i for i in by_words if i not in near][:CANDIDATES]
    lexical = sorted((i for i in pool if i in relevance), key=lambda i: -relevance[i])
    fused = rrf([nearness, lexical])
    pool.sort(key=lambda i: -fused[i])
    return window + pool[:LIMIT]


def load(path):
    dump = json.load(open(path))
    embedded = np.array([t["vector"] for t in dump["turns"]], dtype=np.float64)
    questions = []
    for q in dump["questions"]:
        evidence = {e for e in q["evidence"] if e is not None}
        if q["category"] in CATEGORIES and evidence:
            questions.append({
                "category": q["category"],
                "evidence": evidence,
                "vector": np.array(q["vector"], dtype=np.float64),
                "held": q["held"],
                "qlen": q["qlen"],
            })
    return {
        "id": dump["id"],
        "vectors": in_context(embedded, CONTEXT_WEIGHT),
        "questions": questions,
    }


def evaluate(conversations):
    """(found, evidence) per conversation."""
    rows = []
    for c in conversations:
        found = total = 0
        for q in c["questions"]:
            found += len(set(choose(c, q)) & q["evidence"])
            total += len(q["evidence"])
        rows.append((found, total))
    return rows


def reported(report, embedder):
    """The defaults' (found, evidence) per conversation in a Q1 report (recall.json)."""
    for row in report["prepare"]:
        if row["embedder"] == embedder and row["setting"].startswith("defaults"):
            return [
                tuple(map(sum, zip(*d["by_category"].values()))) for d in row["by_dialogue"]
            ]
    return None


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("dump", help="the directory `recall --dump` wrote")
    parser.add_argument("--check", help="a Q1 report (recall.json) the figures must equal")
    args = parser.parse_args()
    report = json.load(open(args.check)) if args.check else None
    failed = False
    # Each file is `{embedder}-{conversation id}.json`.
    embedders = sorted({os.path.basename(p).split("-", 1)[0]
                        for p in glob.glob(os.path.join(args.dump, "*.json"))})
    for embedder in embedders:
        paths = sorted(glob.glob(os.path.join(args.dump, f"{embedder}-*.json")))
        conversations = [load(p) for p in paths]
        rows = evaluate(conversations)
        found, total = map(sum, zip(*rows))
        cells = " ".join(f"{c['id']} {100 * f / t:.1f}%" for c, (f, t) in zip(conversations, rows))
        print(f"{embedder}: {cells}, pooled {100 * found / total:.1f}%")
        if report is not None:
            expected = reported(report, embedder)
            if expected != rows:
                print(f"  differs from the report: {expected} (report) against {rows}")
                failed = True
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
