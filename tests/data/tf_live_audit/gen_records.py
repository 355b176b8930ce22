"""Random specs and (possibly non-canonical / invalid) Example and SequenceExample records, in the JSON case form
of tests/data/make_golden_parse.py: the generator of the live differential against TensorFlow (used by make.py
here for its random regression cases; needs numpy only)."""
import math
import os
import struct
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))  # tests/

from wirebytes import ld, tag, varint  # noqa: E402,F401  # the wire encoders the tests use (make.py uses ld too)

# ------------------------------------------------------------------ wire


def f32(bits):  # (any int: its low 32 bits)
    return struct.pack("<I", bits & 0xFFFFFFFF)


FLOAT_SPECIAL = [0x00000000, 0x80000000, 0x7FC00000, 0x7FC00001, 0xFFC00000, 0x7F800000, 0xFF800000, 0x00000001,
                 0x3F800000, 0xBF800000, 0x7F7FFFFF]
INT_SPECIAL = [0, 1, -1, 2**63 - 1, -(2**63), 127, 128, 2**31, -(2**31) - 1, 300]


def rand_vals(rng, kind, n):
    if kind == "bytes":
        return [bytes(rng.integers(0, 256, size=int(rng.integers(0, 4)), dtype=np.uint8)) for _ in range(n)]
    if kind == "float":
        return [int(rng.choice(FLOAT_SPECIAL)) if rng.random() < 0.2 else
                int(np.float32(rng.normal() * 10).view(np.uint32)) for _ in range(n)]
    return [int(rng.choice(INT_SPECIAL)) if rng.random() < 0.15 else int(rng.integers(-5, 20)) for _ in range(n)]


def enc_list(rng, kind, vals, style):
    """list message payload"""
    if kind == "bytes":
        return b"".join(ld(1, v) for v in vals)
    packed = style.get("packed", True)
    if kind == "float":
        if packed:
            body = ld(1, b"".join(f32(v) for v in vals)) if (vals or style.get("empty_run")) else b""
        else:
            body = b"".join(tag(1, 5) + f32(v) for v in vals)
    else:
        if packed:
            body = ld(1, b"".join(varint(v) for v in vals)) if (vals or style.get("empty_run")) else b""
        else:
            body = b"".join(tag(1, 0) + varint(v) for v in vals)
    if style.get("list_unknown"):
        body += tag(5, 0) + varint(7)
    return body


FIELD_OF = {"bytes": 1, "float": 2, "int64": 3}


def enc_feature(rng, feat, style):
    """feat: None (kindless) or (kind, vals)"""
    if feat is None:
        return b""
    kind, vals = feat
    b = ld(FIELD_OF[kind], enc_list(rng, kind, vals, style))
    if style.get("feat_unknown"):
        b += ld(6, b"zz")
    return b


def rand_style(rng, weird):
    if not weird:
        return {}
    return {"packed": rng.random() < 0.6, "list_unknown": rng.random() < 0.1, "feat_unknown": rng.random() < 0.1,
            "empty_run": rng.random() < 0.3}


def enc_features(rng, feats, weird):
    """feats: dict key -> feature; returns Features payload entries list (bytes each)"""
    entries = []
    for k, v in feats.items():
        fb = enc_feature(rng, v, rand_style(rng, weird))
        if weird and rng.random() < 0.1:
            body = ld(2, fb) + ld(1, k.encode())  # value first
        else:
            body = ld(1, k.encode()) + ld(2, fb)
        if weird and rng.random() < 0.08:  # an earlier duplicate entry that the later overrides
            junk = enc_feature(rng, ("int64", [99, 98]), {})
            entries.append(ld(1, ld(1, k.encode()) + ld(2, junk)))
        entries.append(ld(1, body))
    if weird and rng.random() < 0.3:
        order = rng.permutation(len(entries))
        entries = [entries[i] for i in order]
    return entries


def unknown_field(rng):
    f = int(rng.integers(3, 20))
    w = int(rng.choice([0, 1, 2, 5]))
    if w == 0:
        return tag(f, 0) + varint(int(rng.integers(0, 1 << 40)))
    if w == 1:
        return tag(f, 1) + bytes(8)
    if w == 5:
        return tag(f, 5) + bytes(4)
    return ld(f, b"junk")


def enc_example(rng, feats, weird):
    entries = enc_features(rng, feats, weird)
    if weird and entries and rng.random() < 0.3:  # split Features across several field-1 occurrences
        cut = int(rng.integers(0, len(entries) + 1))
        out = ld(1, b"".join(entries[:cut])) + ld(1, b"".join(entries[cut:]))
    elif not entries and rng.random() < 0.3:
        out = b""
    else:
        out = ld(1, b"".join(entries))
    if weird and rng.random() < 0.2:
        out = unknown_field(rng) + out if rng.random() < 0.5 else out + unknown_field(rng)
    return out


def enc_seq_example(rng, ctx, lists, weird):
    out = b""
    if ctx or rng.random() < 0.3:
        out += ld(1, b"".join(enc_features(rng, ctx, weird)))
    fl_entries = []
    for k, steps in lists.items():
        fl = b"".join(ld(1, enc_feature(rng, s, rand_style(rng, weird))) for s in steps)
        fl_entries.append(ld(1, ld(1, k.encode()) + ld(2, fl)))
    if weird and rng.random() < 0.3:
        order = rng.permutation(len(fl_entries))
        fl_entries = [fl_entries[i] for i in order]
    if fl_entries or rng.random() < 0.3:
        out += ld(2, b"".join(fl_entries))
    if weird and rng.random() < 0.2:
        out += unknown_field(rng)
    return out


# ------------------------------------------------------------------ specs

DT = ["float32", "int64", "string"]
KIND_OF = {"float32": "float", "int64": "int64", "string": "bytes"}


def enc_value(dtype, v):
    if dtype == "float32":
        return v  # already bits
    if dtype == "string":
        return v.hex()
    return v


def rand_shape(rng, maxdims=2):
    nd = int(rng.choice([0, 1, 1, 2])) if maxdims >= 2 else int(rng.choice([0, 1]))
    return [int(rng.integers(0, 4)) if rng.random() < 0.15 else int(rng.integers(1, 4)) for _ in range(nd)]


def reshape(flat, shape):
    if not shape:
        return flat[0]
    if len(shape) == 1:
        return list(flat)
    step = math.prod(shape[1:])
    return [reshape(flat[i * step:(i + 1) * step], shape[1:]) for i in range(shape[0])]


def rand_default(rng, dtype, shape):
    n = math.prod(shape)
    vals = [enc_value(dtype, v) for v in rand_vals(rng, KIND_OF[dtype], n)]
    if n == 0:
        return reshape(vals, shape) if shape else None
    return reshape(vals, shape)


PART_TYPES = ["RowLengths", "RowSplits", "RowStarts", "RowLimits", "ValueRowIds", "UniformRowLength"]


def gen_example_spec(rng, nfeat, in_sequence_context=False):
    spec = {}
    for i in range(nfeat):
        name = f"f{i}"
        kinds = ["FixedLen", "VarLen", "Sparse", "Ragged", "FixedLenSequence"]
        w = [0.3, 0.2, 0.15, 0.25, 0.1]
        if in_sequence_context:
            kinds, w = ["FixedLen", "VarLen", "Ragged"], [0.45, 0.3, 0.25]
        kind = str(rng.choice(kinds, p=w))
        dtype = str(rng.choice(DT))
        if kind == "FixedLen":
            shape = rand_shape(rng)
            dv = rand_default(rng, dtype, shape) if rng.random() < 0.4 else None
            spec[name] = {"kind": "FixedLen", "shape": shape, "dtype": dtype, "default_value": dv}
        elif kind == "VarLen":
            spec[name] = {"kind": "VarLen", "dtype": dtype}
        elif kind == "Sparse":
            nd = int(rng.choice([1, 1, 2, 3]))
            ik = [f"{name}_i{d}" for d in range(nd)]
            size = [int(rng.integers(1, 6)) for _ in range(nd)]
            spec[name] = {"kind": "Sparse", "index_key": ik[0] if nd == 1 and rng.random() < 0.5 else ik,
                          "value_key": f"{name}_v", "dtype": dtype, "size": size[0] if nd == 1 else size,
                          "already_sorted": bool(rng.random() < 0.3)}
        elif kind == "Ragged":
            np_ = int(rng.choice([0, 0, 1, 1, 2, 3]))
            parts = []
            for j in range(np_):
                t = str(rng.choice(PART_TYPES))
                if t == "UniformRowLength":
                    parts.append({"type": t, "length": int(rng.integers(1, 4))})
                else:
                    parts.append({"type": t, "key": f"{name}_p{j}"})
            spec[name] = {"kind": "Ragged", "dtype": dtype,
                          "value_key": f"{name}_v" if rng.random() < 0.5 else None, "partitions": parts,
                          "row_splits_dtype": str(rng.choice(["int32", "int64"])),
                          "validate": bool(rng.random() < 0.5)}
        else:
            shape = rand_shape(rng)
            shape = [max(d, 1) for d in shape]
            dv = enc_value(dtype, rand_vals(rng, KIND_OF[dtype], 1)[0]) if rng.random() < 0.3 else None
            spec[name] = {"kind": "FixedLenSequence", "shape": shape, "dtype": dtype, "allow_missing": True,
                          "default_value": dv}
    return spec


def ragged_wire(rng, fs):
    """Conforming wire features for a Ragged spec: dict key -> feature"""
    parts = fs["partitions"]
    kind = KIND_OF[fs["dtype"]]
    # top-down counts
    count = int(rng.integers(0, 4))
    levels = []
    for p in parts:
        if p["type"] == "UniformRowLength":
            lengths = [p["length"]] * count
        else:
            lengths = [int(rng.integers(0, 3)) for _ in range(count)]
        levels.append(lengths)
        count = sum(lengths)
    out = {}
    vk = fs["value_key"] or fs["_name"]
    out[vk] = (kind, rand_vals(rng, kind, count))
    for p, lengths in zip(parts, levels):
        if p["type"] == "UniformRowLength":
            continue
        splits = [0]
        for n in lengths:
            splits.append(splits[-1] + n)
        t = p["type"]
        if t == "RowLengths":
            v = lengths
        elif t == "RowSplits":
            v = splits
        elif t == "RowStarts":
            v = splits[:-1]
        elif t == "RowLimits":
            v = splits[1:]
        else:
            v = [r for r, n in enumerate(lengths) for _ in range(n)]
        out[p["key"]] = ("int64", v)
    return out


def conforming(rng, spec, sequence_context=False):
    """Wire features (key -> (kind, vals) / None) conforming to an Example spec."""
    feats = {}
    for name, fs in spec.items():
        k = fs["kind"]
        kind = KIND_OF[fs["dtype"]]
        if k == "FixedLen":
            if fs["default_value"] is not None and rng.random() < 0.35:
                continue
            feats[name] = (kind, rand_vals(rng, kind, math.prod(fs["shape"])))
        elif k == "VarLen":
            if rng.random() < 0.2:
                continue
            feats[name] = (kind, rand_vals(rng, kind, int(rng.integers(0, 4))))
        elif k == "Sparse":
            if rng.random() < 0.15:
                continue
            keys = [fs["index_key"]] if isinstance(fs["index_key"], str) else fs["index_key"]
            sizes = [fs["size"]] if isinstance(fs["size"], int) else fs["size"]
            n = int(rng.integers(0, 4))
            for key, s in zip(keys, sizes):
                feats[key] = ("int64", [int(rng.integers(0, s)) for _ in range(n)])
            feats[fs["value_key"]] = (kind, rand_vals(rng, kind, n))
        elif k == "Ragged":
            if rng.random() < 0.1:
                continue
            feats.update(ragged_wire(rng, dict(fs, _name=name)))
        elif k == "FixedLenSequence":
            if rng.random() < 0.2:
                continue
            feats[name] = (kind, rand_vals(rng, kind, math.prod(fs["shape"]) * int(rng.integers(0, 4))))
    return feats


def mutate_feats(rng, spec, feats):
    """One semantic corruption; returns a tag naming it."""
    keys = list(feats)
    r = rng.random()
    if not keys or r < 0.15:
        # missing required FixedLen
        fixed = [n for n, s in spec.items() if s["kind"] == "FixedLen"]
        if fixed:
            feats.pop(str(rng.choice(fixed)), None)
            return "drop_fixed"
        return "none"
    key = str(rng.choice(keys))
    cur = feats[key]
    if r < 0.35:  # wrong kind
        kinds = [k for k in ("bytes", "float", "int64") if cur is None or k != cur[0]]
        kind = str(rng.choice(kinds))
        feats[key] = (kind, rand_vals(rng, kind, len(cur[1]) if cur else 1))
        return "wrong_kind"
    if r < 0.6 and cur is not None:  # wrong count
        kind, vals = cur
        feats[key] = (kind, vals + rand_vals(rng, kind, 1) if (rng.random() < 0.5 or not vals) else vals[:-1])
        return "wrong_count"
    if r < 0.7:
        feats[key] = None  # kindless
        return "kindless"
    if r < 0.85 and cur is not None and cur[0] == "int64":  # negative / big partition or index values
        vals = list(cur[1])
        if vals:
            vals[int(rng.integers(0, len(vals)))] = int(rng.choice([-1, -5, 2**31, 2**40, 2**63 - 1, 7]))
        else:
            vals = [-1]
        feats[key] = ("int64", vals)
        return "bad_int"
    feats[key] = (cur[0], []) if cur is not None else ("int64", [])
    return "empty"


def byte_mutate(rng, rec):
    if not rec:
        return rec, "none"
    if rng.random() < 0.5:
        return rec[: int(rng.integers(0, len(rec)))], "truncate"
    b = bytearray(rec)
    i = int(rng.integers(0, len(b)))
    b[i] = int(rng.integers(0, 256))
    return bytes(b), "flip"


# ------------------------------------------------------------------ cases


def example_case(rng, i):
    nfeat = int(rng.integers(1, 4))
    spec = gen_example_spec(rng, nfeat)
    api = "parse_single_example" if rng.random() < 0.35 else "parse_example"
    nrec = 1 if api == "parse_single_example" else int(rng.integers(1, 5))
    weird = rng.random() < 0.4
    records, tags = [], []
    for _ in range(nrec):
        feats = conforming(rng, spec)
        t = "ok"
        if rng.random() < 0.25:
            t = mutate_feats(rng, spec, feats)
        if rng.random() < 0.15:  # unrelated extra features
            feats["zz_extra"] = ("float", rand_vals(rng, "float", 2))
        rec = enc_example(rng, feats, weird)
        if rng.random() < 0.06:
            rec, t2 = byte_mutate(rng, rec)
            t += "+" + t2
        records.append(rec)
        tags.append(t)
    case = {"name": f"ex{i}", "api": api, "records": [r.hex() for r in records], "features": spec,
            "tags": tags, "weird": weird}
    return case


def gen_sequence_spec(rng):
    seq = {}
    for i in range(int(rng.integers(0, 4))):
        name = f"s{i}"
        dtype = str(rng.choice(DT))
        k = str(rng.choice(["FixedLenSequence", "VarLen", "Ragged"], p=[0.5, 0.3, 0.2]))
        if k == "FixedLenSequence":
            shape = [max(d, 1) for d in rand_shape(rng)]
            seq[name] = {"kind": "FixedLenSequence", "shape": shape, "dtype": dtype,
                         "allow_missing": bool(rng.random() < 0.5), "default_value": None}
        elif k == "VarLen":
            seq[name] = {"kind": "VarLen", "dtype": dtype}
        else:
            parts = []
            if rng.random() < 0.3:
                t = str(rng.choice(PART_TYPES))
                parts = [{"type": t, "length": int(rng.integers(1, 3))} if t == "UniformRowLength"
                         else {"type": t, "key": f"{name}_p0"}]
            seq[name] = {"kind": "Ragged", "dtype": dtype, "value_key": f"{name}_v" if rng.random() < 0.3 else None,
                         "partitions": parts, "row_splits_dtype": str(rng.choice(["int32", "int64"])),
                         "validate": bool(rng.random() < 0.5)}
    return seq


def conforming_lists(rng, seq):
    lists = {}
    for name, fs in seq.items():
        kind = KIND_OF[fs["dtype"]]
        if rng.random() < 0.15:
            continue  # missing list
        T = int(rng.integers(0, 4))
        if fs["kind"] == "FixedLenSequence":
            n = math.prod(fs["shape"])
            lists[name] = [(kind, rand_vals(rng, kind, n)) for _ in range(T)]
        elif fs["kind"] == "VarLen":
            lists[name] = [(kind, rand_vals(rng, kind, int(rng.integers(0, 4)))) for _ in range(T)]
        else:
            vk = fs["value_key"] or name
            parts = fs["partitions"]
            if not parts:
                lists[vk] = [(kind, rand_vals(rng, kind, int(rng.integers(0, 4)))) for _ in range(T)]
            else:
                p = parts[0]
                vsteps, psteps = [], []
                for _ in range(T):
                    if p["type"] == "UniformRowLength":
                        rows = int(rng.integers(0, 3))
                        vsteps.append((kind, rand_vals(rng, kind, rows * p["length"])))
                        continue
                    lengths = [int(rng.integers(0, 3)) for _ in range(int(rng.integers(0, 3)))]
                    splits = [0]
                    for n in lengths:
                        splits.append(splits[-1] + n)
                    t = p["type"]
                    v = {"RowLengths": lengths, "RowSplits": splits, "RowStarts": splits[:-1],
                         "RowLimits": splits[1:],
                         "ValueRowIds": [r for r, n in enumerate(lengths) for _ in range(n)]}[t]
                    vsteps.append((kind, rand_vals(rng, kind, splits[-1])))
                    psteps.append(("int64", v))
                lists[vk] = vsteps
                if p["type"] != "UniformRowLength":
                    lists[p["key"]] = psteps
    return lists


def mutate_lists(rng, seq, lists):
    if not lists:
        return "none"
    key = str(rng.choice(list(lists)))
    steps = lists[key]
    r = rng.random()
    if r < 0.25:
        del lists[key]
        return "drop_list"
    if not steps or r < 0.4:
        lists[key] = []
        return "empty_list"
    s = int(rng.integers(0, len(steps)))
    cur = steps[s]
    if r < 0.6:
        kinds = [k for k in ("bytes", "float", "int64") if cur is None or k != cur[0]]
        kind = str(rng.choice(kinds))
        steps[s] = (kind, rand_vals(rng, kind, 1))
        return "step_wrong_kind"
    if r < 0.8 and cur is not None:
        steps[s] = (cur[0], cur[1] + rand_vals(rng, cur[0], 1) if rng.random() < 0.5 or not cur[1] else cur[1][:-1])
        return "step_wrong_count"
    if r < 0.9:
        steps[s] = None
        return "step_kindless"
    steps[s] = (cur[0] if cur else "int64", [])
    return "step_empty"


def sequence_case(rng, i):
    ctx = gen_example_spec(rng, int(rng.integers(0, 3)), in_sequence_context=True)
    seq = gen_sequence_spec(rng)
    if not ctx and not seq:
        seq = {"s0": {"kind": "VarLen", "dtype": "int64"}}
    api = "parse_single_sequence_example" if rng.random() < 0.4 else "parse_sequence_example"
    nrec = 1 if api == "parse_single_sequence_example" else int(rng.integers(1, 5))
    weird = rng.random() < 0.35
    records, tags = [], []
    for _ in range(nrec):
        cf = conforming(rng, ctx)
        lists = conforming_lists(rng, seq)
        t = "ok"
        if rng.random() < 0.25:
            t = mutate_lists(rng, seq, lists)
        if rng.random() < 0.1:
            t += "+" + mutate_feats(rng, ctx, cf)
        rec = enc_seq_example(rng, cf, lists, weird)
        if rng.random() < 0.06:
            rec, t2 = byte_mutate(rng, rec)
            t += "+" + t2
        records.append(rec)
        tags.append(t)
    return {"name": f"seq{i}", "api": api, "records": [r.hex() for r in records],
            "context_features": ctx or None, "sequence_features": seq or None, "tags": tags, "weird": weird}
