"""The wire format carries plain numeric arrays and refuses anything else."""

import io
import itertools
import json
import struct

import numpy as np
import pytest

from course.engine.wire import checks, messages


def round_trip(header, arrays):
    return messages.unpack(io.BytesIO(messages.pack(header, arrays)).read)


def test_arrays_keep_dtype_shape_and_values_including_zero_d_and_empty():
    arrays = [
        np.arange(6.0).reshape(2, 3),
        np.float32([1.5]),
        np.array(7.0),
        np.zeros((0, 4)),
        np.array([[True, False]]),
        np.asfortranarray(np.eye(3)),
    ]
    header, out = round_trip({"n": 1}, arrays)
    assert header == {"n": 1}
    for sent, got in zip(arrays, out, strict=True):
        assert got.dtype == sent.dtype and got.shape == sent.shape and np.array_equal(got, sent)
        assert got.flags.writeable


def test_values_are_tagged_and_labelled_by_their_place():
    arrays, labels = [], []
    tagged = messages.encode(
        {"w_q": np.ones(2), "n": 3, "pair": (np.zeros(1), None)}, arrays, labels=labels, path="params"
    )
    assert labels == ["params['w_q']", "params['pair'][0]"]
    decoded = messages.decode(tagged, arrays)
    assert decoded["n"] == 3 and decoded["pair"][1] is None


def test_an_optimizer_state_of_a_layered_model_travels_whole_and_deeper_is_described():
    layer = {"w_q": np.ones((2, 2)), "b_q": np.zeros(2)}
    model = {"tok_emb": np.ones((3, 2)), "layers": [layer, layer]}
    reply = (model, np.zeros(4), {"step": 7, "m": model, "v": model})  # lesson 15's train
    decoded = messages.decode(messages.encode(reply, arrays := []), arrays)
    assert decoded[2]["step"] == 7
    assert np.array_equal(decoded[2]["v"]["layers"][1]["w_q"], np.ones((2, 2)))
    too_deep = messages.decode(messages.encode([[[[[[[np.ones(1)]]]]]]], arrays := []), arrays)
    assert isinstance(too_deep[0][0][0][0][0][0], messages.Opaque)


def test_objects_are_described_not_sent():
    tagged = messages.encode(object(), [])
    value = messages.decode(tagged, [])
    assert isinstance(value, messages.Opaque) and value.type_name == "object"
    assert "o" in messages.encode(np.array([object()]), [])


def message(header: dict, payload: bytes = b"") -> bytes:
    body = json.dumps(header).encode()
    return struct.pack(">I", len(body)) + body + payload


@pytest.mark.parametrize(
    "raw",
    [
        message({"arrays": [["|O", [1]]]}, b"\0" * 8),  # object dtype: never
        message({"arrays": [["<f8", [-1]]]}),
        message({"arrays": [["<f8", [10**12]]]}),  # would be 8 TB
        message({"arrays": [["nonsense", [1]]]}),
        struct.pack(">I", 5) + b"[1, 2",
        struct.pack(">I", 2**31),
    ],
)
def test_malformed_or_hostile_messages_are_refused(raw):
    with pytest.raises((messages.ProtocolError, EOFError)):
        messages.unpack(io.BytesIO(raw).read)


def test_a_truncated_message_is_end_of_file():
    raw = messages.pack({}, [np.ones(4)])[:-3]
    with pytest.raises(EOFError):
        messages.unpack(io.BytesIO(raw).read)


def test_a_tagged_value_has_exactly_the_keys_of_one_of_encodes_forms():
    forms = [{"a"}, {"a", "scalar"}, {"v"}, {"t"}, {"l"}, {"d"}, {"o"}, {"o", "r"}]
    values = {"a": 0, "scalar": False, "v": 1, "t": [], "l": [], "d": {}, "o": "x", "r": "y", "zz": 1}
    for size in range(4):
        for keys in itertools.combinations(values, size):
            tagged = {key: values[key] for key in keys}
            if set(keys) in forms:
                messages.decode(tagged, [np.zeros(2)])
            else:
                with pytest.raises(messages.ProtocolError):
                    messages.decode(tagged, [np.zeros(2)])


def test_labels_name_each_arrays_place_and_a_result_needs_none():
    value = (np.ones(1), {"w": np.zeros(2), "n": [np.ones(3), 4]}, np.float32(2))
    arrays, labels = [], []
    tagged = messages.encode(value, arrays, labels=labels, path="x")
    assert labels == ["x[0]", "x[1]['w']", "x[1]['n'][0]", "x[2]"]
    unlabelled: list = []
    assert messages.encode(value, unlabelled) == tagged and len(unlabelled) == len(arrays)


def outcome(check, kind, shape):
    try:
        dtype, checked, size = check(kind, shape)
    except messages.ProtocolError as problem:
        return type(problem)
    return dtype, checked, size


@pytest.mark.parametrize(
    "shape",
    [[2, 3], [2.0, 3], [True, 3], ["2", 3], [2.5, 3], [-1, 3], [-0.0, 3], [[2], 3], [None], [], [2**40] * 2],
)
@pytest.mark.parametrize("kind", ["<f8", "f8", "<U3", "O", "nonsense"])
def test_a_remembered_array_description_gets_the_answer_it_would_get_afresh(kind, shape):
    checks.checked_array("<f8", [2, 3])  # remembered, as any accepted description is
    for _ in range(2):
        assert outcome(checks.checked_array, kind, shape) == outcome(checks._check_array, kind, shape)


def test_the_remembered_array_descriptions_are_bounded():
    for n in range(2 * checks._CHECKED_MAX):
        checks.checked_array("<i4", [n])
    assert len(checks._CHECKED) <= checks._CHECKED_MAX


def test_a_header_parsed_once_can_be_unpacked_again_unchanged():
    raw = messages.pack({"n": 1, "nested": {"xs": [1, 2]}}, [np.ones(2)])
    parsed = json.loads(raw[4 : 4 + struct.unpack(">I", raw[:4])[0]])
    before = json.dumps(parsed)
    for _ in range(2):  # one object for the same bytes, as the worker's memo returns
        header, arrays = messages.unpack(io.BytesIO(raw).read, loads=lambda data: parsed)
        assert header == {"n": 1, "nested": {"xs": [1, 2]}} and arrays[0].tolist() == [1.0, 1.0]
    assert json.dumps(parsed) == before  # never changed by unpack


def test_the_grader_remembers_only_the_last_small_successful_reply():
    from course.engine.calls.replies import _reply_to_keep

    memo = messages.LastParsed(keep=_reply_to_keep)
    ok, failed = b'{"ok": true, "result": {"v": 1}}', b'{"ok": false, "error": {}}'
    assert memo(ok) is memo(ok) and memo(ok) == {"ok": True, "result": {"v": 1}}
    assert memo(failed) is not memo(failed)  # an error's description is never shared
    big = b'{"ok": true, "pad": "' + b"x" * (1 << 16) + b'"}'
    assert memo(big) is not memo(big)
    assert memo(ok)["result"] == {"v": 1}
    with pytest.raises(ValueError):
        memo(b"")  # what json.loads says, even before anything was remembered
    assert messages.LastParsed(keep=_reply_to_keep)(b"null") is None


def test_the_worker_remembers_the_last_request_header_it_parsed():
    memo = messages.LastParsed()
    with pytest.raises(ValueError):
        memo(b"")  # what json.loads says, even before anything was remembered
    first = memo(b'{"op": "call", "args": {"t": [{"v": 2}]}}')
    assert memo(b'{"op": "call", "args": {"t": [{"v": 2}]}}') is first
    assert type(memo(b'{"op": "call", "args": {"t": [{"v": 2.0}]}}')["args"]["t"][0]["v"]) is float
