#!/usr/bin/python3
"""Independent check of keel's HDF5 encoding, using h5py (Debian's python3-h5py).

  read_with_h5py.py check-keras-layout FILE   read a file keel wrote, the way Keras does; exit 1 on
                                              any mismatch with what h5_file_test.cc wrote
  read_with_h5py.py write-sample FILE         write a file with h5py for keel's reader to read

The expected values here and in h5_file_test.cc (KerasLayoutReadsBackWithH5py,
ReadsFileWrittenByH5py) must be kept in step.
"""
import json
import sys

import h5py
import numpy as np

failures = []


def expect(condition, what):
    if not condition:
        failures.append(what)


def load_attributes_from_hdf5_group(group, name):
    """Keras 2's legacy loader (keras/saving/legacy/hdf5_format.py), including its chunked form."""
    if name in group.attrs:
        return [n.decode("utf8") if hasattr(n, "decode") else n for n in group.attrs[name]]
    data = []
    chunk_id = 0
    while f"{name}{chunk_id}" in group.attrs:
        data.extend(n.decode("utf8") if hasattr(n, "decode") else n
                    for n in group.attrs[f"{name}{chunk_id}"])
        chunk_id += 1
    return data


def check_keras_layout(path):
    with h5py.File(path, "r") as f:
        # Root attributes: fixed-length UTF-8 strings (no HDF5 global heap), which h5py returns as
        # bytes and Keras decodes, as in its legacy loader.
        keras_version = f.attrs["keras_version"]
        if hasattr(keras_version, "decode"):
            keras_version = keras_version.decode("utf8")
        expect(keras_version == "2.13.1", f"keras_version = {keras_version!r}")
        expect(f.attrs["backend"].decode("utf8") == "keel", f"backend = {f.attrs['backend']!r}")
        for name in ("keras_version", "backend", "model_config"):
            info = h5py.check_string_dtype(f.attrs.get_id(name).dtype)
            expect(info is not None and info.encoding == "utf-8" and info.length is not None,
                   f"root attribute {name} is not a fixed-length UTF-8 string: {info}")
        config = json.loads(f.attrs["model_config"].decode("utf8"))
        expect(config["class_name"] == "Sequential", f"model_config = {config!r}")
        expect(config["config"]["name"] == "mlp \u2713", f"model_config name = {config!r}")
        expect(int(f.attrs["keel_format_version"]) == 1,
               f"keel_format_version = {f.attrs['keel_format_version']!r}")
        expect(f.attrs["keel_format_version"].dtype == np.dtype("<i8"),
               f"keel_format_version dtype {f.attrs['keel_format_version'].dtype}")

        weights = f["model_weights"]
        # Exactly what Keras does in load_weights_from_hdf5_group.
        layer_names = [n.decode("utf8") for n in weights.attrs["layer_names"]]
        expect(layer_names == ["dense", "dense_1", "flatten"], f"layer_names = {layer_names}")
        dtype = weights.attrs["layer_names"].dtype
        expect(dtype.kind == "S" and dtype.itemsize == len("dense_1"),
               f"layer_names dtype = {dtype}")
        # numpy 'S' arrays, as Keras writes them: fixed-length, null-padded ASCII.
        info = h5py.check_string_dtype(dtype)
        expect(info is not None and info.encoding == "ascii" and info.length == len("dense_1"),
               f"layer_names string type = {info}")
        tid = weights.attrs.get_id("layer_names").get_type()
        expect(tid.get_strpad() == h5py.h5t.STR_NULLPAD, f"layer_names padding {tid.get_strpad()}")
        expect(load_attributes_from_hdf5_group(weights, "layer_names") == layer_names,
               "layer_names via Keras's loader")

        dense_names = load_attributes_from_hdf5_group(weights["dense"], "weight_names")
        expect(dense_names == ["dense/kernel:0", "dense/bias:0"], f"weight_names = {dense_names}")
        flatten_names = load_attributes_from_hdf5_group(weights["flatten"], "weight_names")
        expect(flatten_names == [], f"flatten weight_names = {flatten_names}")
        expect(weights["flatten"].attrs["weight_names"].shape == (0,),
               f"empty list shape = {weights['flatten'].attrs['weight_names'].shape}")

        kernel = weights["dense"]["dense/kernel:0"]
        expect(kernel.dtype == np.dtype("<f4"), f"kernel dtype = {kernel.dtype}")
        expect(kernel.shape == (3, 2), f"kernel shape = {kernel.shape}")
        expect(kernel.chunks is None and kernel.compression is None, "kernel not contiguous")
        want = np.arange(6, dtype=np.float32).reshape(3, 2) * 0.25 - 0.5
        expect(np.array_equal(kernel[()], want), f"kernel = {kernel[()]!r}")
        bias = f["model_weights/dense/dense/bias:0"]
        expect(bias.shape == (2,) and np.array_equal(bias[()], np.array([1.5, -2.0], np.float32)),
               f"bias = {bias[()]!r}")
        scalar = f["keel/scalar"]
        expect(scalar.shape == () and scalar.dtype == np.dtype("<f4") and scalar[()] == 3.25,
               f"scalar = {scalar[()]!r} shape {scalar.shape}")

        step = f["keel/train_state/step"]
        expect(step.shape == () and step.dtype == np.dtype("<i8") and step[()] == 700,
               f"step = {step[()]!r} {step.dtype}")
        state = f["keel/train_state/config"][()]
        if hasattr(state, "decode"):
            state = state.decode("utf8")
        expect(json.loads(state) == {"epochs": 3, "name": "\u00e9t\u00e9"}, f"config = {state!r}")

        # Lists too large for an HDF5 object header (Keras would chunk them) must still read back.
        big = [n.decode("utf8") for n in f["keel"].attrs["big_list"]]
        expect(big == [f"layer_{i:05d}_" + "x" * 40 for i in range(2000)],
               f"big_list has {len(big)} entries")
    if failures:
        for failure in failures:
            print("MISMATCH:", failure)
        return 1
    print("OK")
    return 0


def write_sample(path):
    with h5py.File(path, "w") as f:
        f.attrs["fixed"] = np.bytes_(b"fixed-length")
        f.attrs["variable"] = "variable \u2713"
        f.attrs["names_fixed"] = np.asarray([b"dense", b"dense_1"])
        f.attrs["names_variable"] = np.array(["conv1/kernel:0", "bn"], dtype=h5py.string_dtype())
        f.attrs["names_empty_float"] = np.asarray([])  # what Keras writes for a layer w/o weights
        f.attrs["count"] = np.int64(-42)
        f.attrs["count_i32"] = np.int32(7)
        g = f.create_group("model_weights/conv1/conv1")
        g["kernel:0"] = (np.arange(24, dtype=np.float32).reshape(2, 3, 4) / 8 - 1)
        f["doubles"] = np.arange(4, dtype=np.float64)
        f["text"] = "{\"a\": 1}"
        f["text_fixed"] = np.bytes_(b"bytes")
        f["step"] = np.int64(123456789012)
    return 0


if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[1] not in ("check-keras-layout", "write-sample"):
        print(__doc__)
        sys.exit(2)
    command, file_path = sys.argv[1], sys.argv[2]
    sys.exit(check_keras_layout(file_path) if command == "check-keras-layout"
             else write_sample(file_path))
