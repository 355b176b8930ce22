"""TensorFlow's answers for the live differential audit (tests/test_tf_live_audit.py), written to cases.json here.

Run by hand with a Python that has TensorFlow (tensorflow-cpu 2.21 was used) and numpy, from the repository root:

    /work/tfvenv/bin/python tests/data/tf_live_audit/make.py

It never imports tfr_torch. Cases use the JSON schema of tests/data/make_golden_parse.py (whose spec conversion
and output encoding it reuses), plus "group": the finding a hand-made case minimizes ("fixed_*"), a TF quirk
tfr_torch does not copy ("quirk_*"), or "random" for the regression cases drawn by gen_records.py with fixed
seeds (Examples and SequenceExamples with every spec kind, non-canonical encodings and corruptions).
"spec_errors" records what TF says about specs it refuses.
"""

import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.dirname(HERE))

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

import gen_records as g  # noqa: E402
import make_golden_parse as mgp  # noqa: E402

CASES = []


def add(group, name, api, records, **specs):
    case = {"group": group, "name": name, "api": api, "records": [r.hex() for r in records]}
    case.update(specs)
    CASES.append(case)


def ex(feats):
    """An Example from {key: raw Feature bytes}, entries key then value."""
    return g.ld(1, b"".join(g.ld(1, g.ld(1, k.encode()) + g.ld(2, v)) for k, v in feats.items()))


def seq(ctx=None, lists=None, ctx_entries=None, list_entries=None):
    out = b""
    if ctx is not None or ctx_entries is not None:
        entries = ctx_entries if ctx_entries is not None else [g.ld(1, k.encode()) + g.ld(2, v) for k, v in ctx.items()]
        out += g.ld(1, b"".join(g.ld(1, e) for e in entries))
    if lists is not None or list_entries is not None:
        entries = list_entries if list_entries is not None else [
            g.ld(1, k.encode()) + g.ld(2, b"".join(g.ld(1, s) for s in steps)) for k, steps in lists.items()]
        out += g.ld(2, b"".join(g.ld(1, e) for e in entries))
    return out


def ints(*values):
    return g.ld(3, g.ld(1, b"".join(g.varint(v) for v in values)))


VARLEN_I = {"kind": "VarLen", "dtype": "int64"}
FLS_I = {"kind": "FixedLenSequence", "shape": [], "dtype": "int64", "allow_missing": True, "default_value": None}
RAGGED_I = {"kind": "Ragged", "dtype": "int64", "value_key": None, "partitions": [], "row_splits_dtype": "int32",
            "validate": False}
SEQ_APIS = ("parse_sequence_example", "parse_single_sequence_example")
EX_APIS = ("parse_example", "parse_single_example")


def step_trailing_cases():
    """A step of a feature list read by the spec with bytes after its list, or after the packed run in it: TF's
    parse_sequence_example refuses (its parse_example takes the same Feature in an Example or a context)."""
    steps = {
        "int64_list_unknown_after_run": g.ld(3, g.ld(1, g.varint(5)) + g.tag(5, 0) + g.varint(7)),
        "feature_unknown_after_list": ints(5) + g.tag(6, 0) + g.varint(1),
        "feature_ld_unknown_after_list": ints(5) + g.ld(6, b"zz"),
        "empty_list_unknown_after": g.ld(3, b"") + g.tag(6, 0) + g.varint(1),
    }
    for sname, step in steps.items():
        for kname, spec in (("varlen", VARLEN_I), ("fls", FLS_I), ("ragged", RAGGED_I)):
            for api in SEQ_APIS:
                add("fixed_step_trailing", f"step_{sname}_{kname}_{api}", api, [seq(lists={"k": [ints(1), step]})],
                    context_features=None, sequence_features={"k": spec})
        # the same Feature in an Example, in a context, and in a list the spec does not read: TF takes it
        add("fixed_step_trailing", f"step_{sname}_in_example", "parse_example", [ex({"k": step})],
            features={"k": VARLEN_I})
        add("fixed_step_trailing", f"step_{sname}_in_context", "parse_sequence_example", [seq(ctx={"k": step})],
            context_features={"k": VARLEN_I}, sequence_features=None)
        add("fixed_step_trailing", f"step_{sname}_unread_list", "parse_sequence_example",
            [seq(lists={"k": [ints(1)], "u": [step]})], context_features=None, sequence_features={"k": VARLEN_I})


def value_first_cases():
    """A SequenceExample map entry holding its value before its key: TF's parse_sequence_example refuses it wherever
    it is (an Example's map entry in that order is taken)."""
    good = ints(5)
    key_first = g.ld(1, b"k") + g.ld(2, g.ld(1, good))
    for api in SEQ_APIS:
        add("fixed_value_first", f"value_first_read_list_{api}", api,
            [seq(list_entries=[g.ld(2, g.ld(1, good)) + g.ld(1, b"k")])],
            context_features=None, sequence_features={"k": VARLEN_I})
        add("fixed_value_first", f"value_first_unread_list_{api}", api,
            [seq(list_entries=[key_first, g.ld(2, g.ld(1, good)) + g.ld(1, b"u")])],
            context_features=None, sequence_features={"k": VARLEN_I})
        add("fixed_value_first", f"value_first_read_context_{api}", api,
            [seq(ctx_entries=[g.ld(2, good) + g.ld(1, b"c")])],
            context_features={"c": VARLEN_I}, sequence_features=None)
        add("fixed_value_first", f"value_first_unread_context_{api}", api,
            [seq(ctx_entries=[g.ld(2, good) + g.ld(1, b"u"), g.ld(1, b"c") + g.ld(2, good)], lists={"k": [good]})],
            context_features={"c": VARLEN_I}, sequence_features={"k": VARLEN_I})
    for api in EX_APIS:
        add("fixed_value_first", f"value_first_example_{api}", api,
            [g.ld(1, g.ld(1, g.ld(2, good) + g.ld(1, b"k")))], features={"k": VARLEN_I})


def zero_size_default_cases():
    """FixedLenFeature of no values with default_value=[]: TF reads the empty default as none (required)."""
    for shape, default in (([0], []), ([0, 2], []), ([2, 0], [[], []])):
        spec = {"c": {"kind": "FixedLen", "shape": shape, "dtype": "int64", "default_value": default}}
        tag = "x".join(map(str, shape))
        for api in EX_APIS:
            for rname, rec in (("missing", ex({})), ("kindless", ex({"c": b""})), ("empty_list", ex({"c": ints()}))):
                add("fixed_zero_size_default", f"zero_default_{tag}_{rname}_{api}", api, [rec], features=spec)
        for api in SEQ_APIS:
            add("fixed_zero_size_default", f"zero_default_{tag}_context_missing_{api}", api, [seq(ctx={})],
                context_features=spec, sequence_features=None)
    add("fixed_zero_size_default", "zero_default_float_batch_second_missing", "parse_example",
        [ex({"c": g.ld(2, b"")}), ex({})],
        features={"c": {"kind": "FixedLen", "shape": [0], "dtype": "float32", "default_value": []}})


def kindless_context_cases():
    """A context Feature with no kind set: TF's parse_sequence_example reads it as present with no values (in an
    Example, and with VarLen/Ragged specs, that is the same as missing)."""
    specs = {
        "fixed_default": {"kind": "FixedLen", "shape": [], "dtype": "int64", "default_value": 10},
        "fixed_string_default": {"kind": "FixedLen", "shape": [2], "dtype": "string", "default_value": ["61", "62"]},
        "fixed_no_default": {"kind": "FixedLen", "shape": [], "dtype": "float32", "default_value": None},
        "fixed_shape0": {"kind": "FixedLen", "shape": [0], "dtype": "int64", "default_value": None},
        "fixed_shape3x0": {"kind": "FixedLen", "shape": [3, 0], "dtype": "string", "default_value": None},
        "varlen": VARLEN_I,
        "ragged": RAGGED_I,
    }
    for sname, spec in specs.items():
        for api in SEQ_APIS:
            add("fixed_kindless_context", f"kindless_context_{sname}_{api}", api, [seq(ctx={"c": b""})],
                context_features={"c": spec}, sequence_features=None)
        # an Example: missing (defaults apply)
        if sname == "fixed_default":
            for api in EX_APIS:
                add("fixed_kindless_context", f"kindless_example_{sname}_{api}", api, [ex({"c": b""})],
                    features={"c": spec})
    add("fixed_kindless_context", "kindless_context_second_of_three", "parse_sequence_example",
        [seq(ctx={"c": ints(1)}), seq(ctx={}), seq(ctx={"c": b""})],
        context_features={"c": specs["fixed_default"]}, sequence_features={"s": VARLEN_I})
    add("fixed_kindless_context", "kindless_context_shape0_batch", "parse_sequence_example",
        [seq(ctx={"c": ints()}), seq(ctx={"c": b""}), seq(ctx={"c": ints()})],
        context_features={"c": specs["fixed_shape0"]}, sequence_features=None)


def empty_row_splits_cases():
    """RowSplits that are missing or empty: TF's batch forms and feature lists read no rows; its single forms (one
    Example, one SequenceExample's context) fail in TF's Python wrapper ("Dimension -1 must be >= 0", or a
    StridedSlice error with validate=True), a quirk tfr_torch does not copy (its single forms equal the batch's
    rows)."""
    rs = {"type": "RowSplits", "key": "p"}
    rl = {"type": "RowLengths", "key": "q"}
    url = {"type": "UniformRowLength", "length": 2}

    def ragged(parts, validate=False):
        return {"r": {"kind": "Ragged", "dtype": "int64", "value_key": "v", "partitions": parts,
                      "row_splits_dtype": "int32", "validate": validate}}

    for pname, parts in (("rs", [rs]), ("rl_rs", [rl, rs]), ("rs_rl", [rs, rl]), ("rs_url", [rs, url]),
                         ("url_rs", [url, rs])):
        for validate in (False, True):
            for api in EX_APIS:
                add("quirk_empty_row_splits", f"empty_splits_{pname}_v{int(validate)}_missing_{api}", api,
                    [ex({"x": ints(1)})], features=ragged(parts, validate))
    for api in EX_APIS:
        add("quirk_empty_row_splits", f"empty_splits_present_empty_{api}", api, [ex({"p": ints()})],
            features=ragged([rs]))
    for api in SEQ_APIS:
        add("quirk_empty_row_splits", f"empty_splits_context_missing_{api}", api, [seq(ctx={"x": ints(1)})],
            context_features=ragged([rs]), sequence_features=None)
        add("quirk_empty_row_splits", f"empty_splits_context_present_empty_{api}", api, [seq(ctx={"p": ints()})],
            context_features=ragged([rs]), sequence_features=None)
        add("quirk_empty_row_splits", f"empty_splits_feature_list_step_{api}", api,
            [seq(lists={"v": [ints(), ints(5)], "p": [ints(), ints(0, 1)]})],
            context_features=None, sequence_features=ragged([rs]))


def spec_errors():
    """SparseFeature specs TF refuses when it builds them (index_key and size, one a list and one not)."""
    out = []
    for index_key, size in ((["i"], 4), ("i", [4]), (["i", "j"], [2, 3]), ("i", 4)):
        try:
            tf.io.parse_example(tf.constant([b""]), {"s": tf.io.SparseFeature(index_key, "v", tf.int64, size)})
            result = "ok"
        except Exception as e:  # noqa: BLE001 - the error is the answer
            result = type(e).__name__
        out.append({"index_key": index_key, "size": size, "tf": result})
    return out


def random_cases(seed, n_example, n_sequence):
    rng = np.random.default_rng(seed)
    for i in range(n_example):
        case = g.example_case(rng, i)
        add("random", f"r{seed}_{case['name']}", case["api"], [bytes.fromhex(h) for h in case["records"]],
            features=case["features"])
    for i in range(n_sequence):
        case = g.sequence_case(rng, i)
        add("random", f"r{seed}_{case['name']}", case["api"], [bytes.fromhex(h) for h in case["records"]],
            context_features=case["context_features"], sequence_features=case["sequence_features"])


def main():
    tf.config.set_visible_devices([], "GPU")
    tf.get_logger().setLevel("ERROR")
    step_trailing_cases()
    value_first_cases()
    zero_size_default_cases()
    kindless_context_cases()
    empty_row_splits_cases()
    random_cases(2021, 70, 70)
    for case in CASES:
        case.update(mgp.run_case(case))
    data = {"generator": "tests/data/tf_live_audit/make.py", "tensorflow": tf.__version__,
            "spec_errors": spec_errors(), "cases": CASES}
    with open(os.path.join(HERE, "cases.json"), "w", encoding="utf-8") as f:
        json.dump(data, f, ensure_ascii=True, sort_keys=True, separators=(",", ":"))
        f.write("\n")
    n_err = sum("error" in c for c in CASES)
    print(f"wrote {len(CASES)} cases ({n_err} TF errors) to {HERE}/cases.json")


if __name__ == "__main__":
    main()
